// Read throughput of parquet_documents on a large file that is not committed: set
// LMT_PARQUET_BENCH_FILE=PATH (and LMT_PARQUET_BENCH_COLUMN, default "text"); skipped otherwise.
// Reports MB/s of string data delivered and checks the documents were all read (peak RSS too, to
// show that memory does not grow with the file).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>

#include "data/parquet_source.h"

namespace lmt {
namespace {

TEST(ParquetThroughput, LargeFile) {
  const char* file = std::getenv("LMT_PARQUET_BENCH_FILE");
  if (!file) GTEST_SKIP() << "set LMT_PARQUET_BENCH_FILE to a large Parquet file to measure";
  const char* col = std::getenv("LMT_PARQUET_BENCH_COLUMN");
  const auto t0 = std::chrono::steady_clock::now();
  int64_t docs = 0, bytes = 0;
  uint64_t sum = 0;
  SkippedRecords skipped;
  parquet_documents(file, col ? col : "text", &skipped, [&](std::string_view d) {
    ++docs;
    bytes += static_cast<int64_t>(d.size());
    sum += static_cast<uint8_t>(d.back());  // touch the value
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "%s: %lld documents, %.1f MB of text in %.2f s = %.0f MB/s (skipped %lld; peak RSS "
      "%.0f MB; %llu)\n",
      file, static_cast<long long>(docs), bytes / 1e6, s, bytes / 1e6 / s,
      static_cast<long long>(skipped.total), ru.ru_maxrss / 1024.0,
      static_cast<unsigned long long>(sum));
  EXPECT_GT(docs, 0);
}

}  // namespace
}  // namespace lmt
