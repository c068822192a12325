// A Parquet file through what a Parquet source reads: its columns, the rows of the columns an
// instruction source names (every byte of every value touched, so that a view past its buffer is
// caught), and the documents of a pretraining source with bad records skipped.
#include "data/parquet_source.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

int parquet(const uint8_t* data, size_t size) {
  const std::string path = write_temp("input.parquet", data, size);
  return accept_user_error([&] {
    parquet_columns(path);
    uint64_t sum = 0;
    parquet_rows(path, {"text", "title", "blob"},
                 [&](int64_t, std::span<const std::optional<std::string_view>> values) {
                   for (const auto& v : values)
                     if (v)
                       for (char c : *v) sum = sum * 31 + static_cast<uint8_t>(c);
                 });
    SkippedRecords skipped;
    parquet_documents(path, "text", &skipped, [&](std::string_view doc) {
      expect(!doc.empty(), "documents not empty");
      sum += doc.size();
    });
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(parquet)
