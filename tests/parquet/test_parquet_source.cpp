// The Parquet reader against fixtures from two independent writers (arrow-rs via parquet-wasm,
// DuckDB; scripts/make_parquet_fixtures.mjs): every value of every string column, in order,
// equals the writer's input; documents, skipping, several columns per row; and one clear
// UserError for each kind of bad input.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "data/parquet/parquet_reader.h"
#include "data/parquet_source.h"
#include "data/text_source.h"
#include "parquet/parquet_test_util.h"

namespace lmt {
namespace {

using test::expected_column;
using test::parquet_fixtures;
using Column = std::vector<std::optional<std::string>>;

const char* kStringColumns[] = {"text", "title", "blob"};

Column read_column(const std::string& path, const std::string& column) {
  Column out;
  int64_t expect_row = 0;
  parquet_rows(
      path, {column}, [&](int64_t row, std::span<const std::optional<std::string_view>> v) {
        EXPECT_EQ(row, ++expect_row);
        EXPECT_EQ(v.size(), 1u);
        out.emplace_back(v[0] ? std::optional<std::string>(std::string(*v[0])) : std::nullopt);
      });
  return out;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

bool valid_utf8(const std::string& s);  // below

TEST(Parquet, FixturesExist) {
  // 12 arrow-rs codec x page version x dictionary files, the long-string and delta files, DuckDB's.
  EXPECT_GE(parquet_fixtures().size(), 19u);
}

TEST(Parquet, EveryValueOfEveryFixture) {
  for (const std::string& path : parquet_fixtures()) {
    SCOPED_TRACE(path);
    for (const char* column : kStringColumns) {
      Column want = expected_column(path, column);
      Column got = read_column(path, column);
      ASSERT_EQ(got.size(), want.size()) << column;
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << column << " row " << i;
    }
  }
}

TEST(Parquet, SeveralColumnsPerRowWithNulls) {
  for (const std::string& path : parquet_fixtures()) {
    SCOPED_TRACE(path);
    Column text = expected_column(path, "text"), title = expected_column(path, "title"),
           blob = expected_column(path, "blob");
    size_t rows = 0, nulls = 0;
    parquet_rows(path, {"blob", "text", "title", "text"},
                 [&](int64_t row, std::span<const std::optional<std::string_view>> v) {
                   ASSERT_EQ(v.size(), 4u);
                   size_t i = static_cast<size_t>(row - 1);
                   ASSERT_LT(i, text.size());
                   auto same = [](const std::optional<std::string_view>& a,
                                  const std::optional<std::string>& b) {
                     return a.has_value() == b.has_value() && (!a || *a == *b);
                   };
                   EXPECT_TRUE(same(v[0], blob[i]) && same(v[1], text[i]) && same(v[2], title[i]) &&
                               same(v[3], text[i]))
                       << "row " << row;
                   nulls += !v[1];
                   ++rows;
                 });
    EXPECT_EQ(rows, text.size());
    EXPECT_GT(nulls, 0u);
  }
}

TEST(Parquet, DocumentsSkipNullEmptyAndInvalidUtf8) {
  for (const std::string& path : parquet_fixtures()) {
    SCOPED_TRACE(path);
    for (const char* column : {"text", "blob"}) {
      Column want = expected_column(path, column);
      std::vector<std::string> docs, want_docs;
      int64_t nulls = 0, empty = 0, bad_utf8 = 0, first_bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        bool bad = true;
        if (!want[i])
          ++nulls;
        else if (want[i]->empty())
          ++empty;
        else if (!valid_utf8(*want[i]))
          ++bad_utf8;
        else
          bad = false, want_docs.push_back(*want[i]);
        if (bad && !first_bad) first_bad = static_cast<int64_t>(i) + 1;
      }
      SkippedRecords skipped;
      parquet_documents(path, column, &skipped, [&](std::string_view d) { docs.emplace_back(d); });
      EXPECT_EQ(docs, want_docs);
      EXPECT_EQ(skipped.total, nulls + empty + bad_utf8);
      EXPECT_EQ(skipped.by_reason["null in column '" + std::string(column) + "'"], nulls);
      EXPECT_EQ(skipped.by_reason["empty document"], empty);
      EXPECT_EQ(skipped.by_reason["invalid UTF-8"], bad_utf8);
      ASSERT_GT(first_bad, 0);
      // Without skipping, the first bad record stops the read: "FILE: row N: reason".
      std::string msg = error_of([&] { parquet_documents(path, column, nullptr, [](auto) {}); });
      EXPECT_NE(msg.find(path + ": row " + std::to_string(first_bad) + ": "), std::string::npos)
          << msg;
    }
  }
}

TEST(Parquet, TextSourceDispatch) {
  const std::string path = test::parquet_dir() + "/duckdb_zstd_v2.parquet";
  TextSourceSpec spec;
  spec.path = path;
  spec.format = "parquet";
  spec.on_error = "skip";
  TextSourceStats stats;
  std::vector<std::string> docs = read_documents(spec, 0, &stats);
  std::vector<std::string> want;
  SkippedRecords want_skipped;
  parquet_documents(path, "text", &want_skipped, [&](std::string_view d) { want.emplace_back(d); });
  EXPECT_EQ(docs, want);
  EXPECT_EQ(stats.documents, static_cast<int64_t>(want.size()));
  EXPECT_EQ(stats.skipped.total, want_skipped.total);
  EXPECT_GT(stats.skipped.total, 0);
  spec.field = "title";
  EXPECT_EQ(read_documents(spec, 0).size(), expected_column(path, "title").size());
}

TEST(Parquet, ColumnsAndTypes) {
  for (const std::string& path : parquet_fixtures(true)) {
    SCOPED_TRACE(path);
    std::vector<ParquetColumn> cols = parquet_columns(path);
    ASSERT_EQ(cols.size(), 6u);
    std::string listed;
    for (const auto& c : cols) listed += c.name + ":" + c.type + " ";
    EXPECT_EQ(listed, "id:INT64 score:DOUBLE text:STRING title:STRING tags:LIST blob:BYTE_ARRAY ");
    // arrow-rs writes `title` REQUIRED (no definition levels), DuckDB OPTIONAL: both paths run.
    parquet::ParquetFile f(path);
    const bool arrow_rs = path.find("/arrowrs_") != std::string::npos;
    EXPECT_EQ(f.string_column("title").max_def, arrow_rs ? 0 : 1);
    EXPECT_EQ(f.string_column("text").max_def, 1);
  }
}

TEST(Parquet, WrongColumnErrors) {
  const std::string path = test::parquet_dir() + "/arrowrs_snappy_v1_dict.parquet";
  std::string msg = error_of([&] { parquet_documents(path, "body", nullptr, [](auto) {}); });
  EXPECT_EQ(msg, path +
                     ": no column 'body' (columns: id: INT64, score: DOUBLE, text: STRING, "
                     "title: STRING, tags: LIST, blob: BYTE_ARRAY)");
  msg = error_of([&] { parquet_rows(path, {"text", "id"}, [](auto, auto) {}); });
  EXPECT_EQ(msg, path + ": column 'id' is INT64, not a string column");
  msg = error_of([&] { parquet_rows(path, {"score"}, [](auto, auto) {}); });
  EXPECT_EQ(msg, path + ": column 'score' is DOUBLE, not a string column");
  msg = error_of([&] { parquet_documents(path, "tags", nullptr, [](auto) {}); });
  EXPECT_NE(msg.find(path + ": column 'tags' is a nested LIST column"), std::string::npos) << msg;
}

TEST(Parquet, UnsupportedCodecNamesFileColumnAndCodec) {
  const std::string path = test::parquet_dir() + "/arrowrs_gzip_v1.parquet";
  std::string msg = error_of([&] { parquet_documents(path, "text", nullptr, [](auto) {}); });
  EXPECT_EQ(msg, path +
                     ": column 'text', row group 0: compression codec GZIP is not supported "
                     "(supported: UNCOMPRESSED, SNAPPY, ZSTD)");
}

// ---- damaged files ----

class DamagedParquet : public ::testing::Test {
 protected:
  std::string source = test::parquet_dir() + "/arrowrs_uncompressed_v1_plain.parquet";
  std::string bytes = test::read_file_bytes(source);
  test::TempDir dir;
  std::string path = dir.file("damaged.parquet");

  std::string read_error(const std::string& data) {
    test::write_file_bytes(path, data);
    return error_of([&] { parquet_rows(path, {"title", "text"}, [](auto, auto) {}); });
  }
  // The first page header of `text` in row group 0: its offset in the file.
  int64_t text_chunk_start() {
    parquet::ParquetFile f(source);
    const auto& chunk = f.meta().row_groups.at(0).columns.at(f.string_column("text").leaf);
    return chunk.dictionary_page_offset.value_or(chunk.data_page_offset);
  }
  int64_t text_chunk_end() {
    parquet::ParquetFile f(source);
    const auto& chunk = f.meta().row_groups.at(0).columns.at(f.string_column("text").leaf);
    return text_chunk_start() + chunk.total_compressed_size;
  }
};

TEST_F(DamagedParquet, BadMagic) {
  std::string d = bytes;
  d[0] = 'X';
  EXPECT_EQ(read_error(d), path + ": not a Parquet file (no PAR1 magic at the start)");
  d = bytes;
  d[d.size() - 1] = '!';
  EXPECT_EQ(read_error(d), path + ": not a Parquet file or truncated (no PAR1 magic at the end)");
  EXPECT_EQ(read_error("hello, world\n"),
            path + ": not a Parquet file (no PAR1 magic at the start)");
  EXPECT_EQ(read_error("PAR1"), path + ": not a Parquet file (only 4 bytes)");
}

TEST_F(DamagedParquet, Truncated) {
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{13}}) {
    std::string msg = read_error(bytes.substr(0, keep));
    EXPECT_EQ(msg, path + ": not a Parquet file or truncated (no PAR1 magic at the end)");
  }
}

TEST_F(DamagedParquet, FooterLengthBeforeStart) {
  std::string d = bytes;
  uint32_t len = static_cast<uint32_t>(d.size());
  std::memcpy(&d[d.size() - 8], &len, 4);
  EXPECT_EQ(read_error(d), path + ": footer length " + std::to_string(len) +
                               " points before the start of the file (" + std::to_string(d.size()) +
                               " bytes; truncated or corrupt)");
}

TEST_F(DamagedParquet, CorruptFooter) {
  std::string d = bytes;
  uint32_t len;
  std::memcpy(&len, &d[d.size() - 8], 4);
  // Cut the footer short: keep its first half, with a matching length.
  uint32_t half = len / 2;
  std::string cut = d.substr(0, d.size() - 8 - len + half);
  cut.append(reinterpret_cast<const char*>(&half), 4);
  cut += "PAR1";
  std::string msg = read_error(cut);
  EXPECT_EQ(msg.rfind(path + ": footer: ", 0), 0u) << msg;
}

TEST_F(DamagedParquet, CorruptPageHeader) {
  std::string d = bytes;
  int64_t at = text_chunk_start();
  for (int i = 0; i < 4; ++i) d[static_cast<size_t>(at + i)] = '\xff';
  std::string msg = read_error(d);
  EXPECT_EQ(msg.rfind(path + ": column 'text', row group 0: page at byte " + std::to_string(at) +
                          ": page header: ",
                      0),
            0u)
      << msg;
}

TEST_F(DamagedParquet, PageSizePastTheChunk) {
  // Page header: type (0x15 varint), uncompressed size (0x15 varint), compressed size (0x15
  // varint). The compressed size's varint is rewritten in place to a larger value.
  std::string d = bytes;
  size_t p = static_cast<size_t>(text_chunk_start());
  auto skip_field = [&] {
    ASSERT_EQ(static_cast<uint8_t>(d[p++]), 0x15);
    while (static_cast<uint8_t>(d[p]) & 0x80) ++p;
    ++p;
  };
  skip_field();
  skip_field();
  ASSERT_EQ(static_cast<uint8_t>(d[p++]), 0x15);
  size_t k = 0;
  while (static_cast<uint8_t>(d[p + k]) & 0x80) d[p + k++] = '\xfe';
  d[p + k] = 0x7f;
  const int64_t claimed = ((int64_t{1} << (7 * (k + 1))) - 2) / 2;
  ASSERT_GT(claimed, text_chunk_end() - text_chunk_start());
  std::string msg = read_error(d);
  EXPECT_NE(msg.find(path + ": column 'text', row group 0: page at byte "), std::string::npos);
  EXPECT_NE(
      msg.find(": page size " + std::to_string(claimed) + " runs past the end of the column chunk"),
      std::string::npos)
      << msg;
}

TEST_F(DamagedParquet, UnsupportedEncodingNamesIt) {
  // Page header: type, uncompressed size, compressed size (each 0x15 + varint), then the data
  // page header (0x2c: field 5, a struct): num_values (0x15 + varint), encoding (0x15 + zigzag
  // varint; 0 = PLAIN). The encoding is rewritten to BYTE_STREAM_SPLIT (9, zigzag 18).
  std::string d = bytes;
  size_t p = static_cast<size_t>(text_chunk_start());
  auto skip_field = [&] {
    ASSERT_EQ(static_cast<uint8_t>(d[p++]), 0x15);
    while (static_cast<uint8_t>(d[p]) & 0x80) ++p;
    ++p;
  };
  skip_field();
  skip_field();
  skip_field();
  ASSERT_EQ(static_cast<uint8_t>(d[p++]), 0x2c);
  skip_field();
  ASSERT_EQ(static_cast<uint8_t>(d[p++]), 0x15);
  ASSERT_EQ(d[p], 0);
  d[p] = 18;
  EXPECT_EQ(read_error(d), path +
                               ": column 'text', row group 0: encoding BYTE_STREAM_SPLIT is "
                               "not supported (supported: PLAIN, PLAIN_DICTIONARY, "
                               "RLE_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY)");
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

}  // namespace
}  // namespace lmt
