// lmtrain's Parquet reader against files that pyarrow writes at test time from fresh random values
// (scripts/make_parquet_reference.py): every codec the reader claims (none, Snappy, ZSTD) x data
// page v1 and v2 x every string encoding (dictionary with fallback to plain, PLAIN,
// DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY), with nulls, a row group of nulls only, empty and
// long values, several row groups and pages. Every value of every string column reads back equal to
// what pyarrow was given, in order; so does the text path (parquet_documents, nulls skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "data/parquet_source.h"
#include "parquet/parquet_test_util.h"
#include "reference_util.h"

namespace lmt {
namespace {

using Column = std::vector<std::optional<std::string>>;

Column read_column(const std::string& path, const std::string& column) {
  Column out;
  parquet_rows(
      path, {column}, [&](int64_t row, std::span<const std::optional<std::string_view>> v) {
        EXPECT_EQ(row, static_cast<int64_t>(out.size()) + 1);
        out.emplace_back(v[0] ? std::optional<std::string>(std::string(*v[0])) : std::nullopt);
      });
  return out;
}

TEST(ParquetReference, PyarrowFilesOfEveryEncodingAndCodecReadBackEqual) {
  test::TempDir dir;
  const uint32_t seed = test::fresh_seed("parquet");
  ASSERT_NO_FATAL_FAILURE(test::run_reference_script(
      "scripts/make_parquet_reference.py",
      "--out '" + dir.path.string() + "' --seed " + std::to_string(seed)));
  if (testing::Test::HasFailure()) return;

  std::set<std::string> combos;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    if (e.path().extension() != ".parquet") continue;
    const std::string path = e.path().string();
    SCOPED_TRACE(path);
    ++files;
    const auto meta = nlohmann::json::parse(
        test::read_file_bytes(path.substr(0, path.size() - 8) + ".json"))["meta"];
    combos.insert(meta["codec"].get<std::string>() + "/" + meta["page_version"].get<std::string>() +
                  "/" + meta["encoding"].get<std::string>());
    EXPECT_GE(meta["row_groups"].get<int>(), 3);
    for (const char* column : {"text", "title", "blob"}) {
      const Column want = test::expected_column(path, column);
      const Column got = read_column(path, column);
      ASSERT_EQ(got.size(), want.size()) << column;
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << column << " row " << i + 1;
    }
    // The text path: one document per non-null, non-empty value, in order.
    std::vector<std::string> docs, want_docs;
    SkippedRecords skipped;
    parquet_documents(path, "text", &skipped, [&](std::string_view d) { docs.emplace_back(d); });
    int64_t want_skipped = 0;
    for (const auto& v : test::expected_column(path, "text")) {
      if (v && !v->empty())
        want_docs.push_back(*v);
      else
        ++want_skipped;
    }
    EXPECT_EQ(docs, want_docs);
    EXPECT_EQ(skipped.total, want_skipped);
  }
  EXPECT_EQ(files, 24);
  EXPECT_EQ(combos.size(), 24u);  // 3 codecs x 2 page versions x 4 encodings, each once
}

}  // namespace
}  // namespace lmt
