// Read throughput of parquet_documents on a large file that is not committed, for
// docs/performance.md: MB/s of string data delivered, documents, and peak RSS (memory must not
// grow with the file). LMT_PARQUET_BENCH_FILE=PATH names the file (LMT_PARQUET_BENCH_COLUMN,
// default "text"); without it the benchmark reports an error instead of a number. A file can be
// made with
//   ~/.cache/lmtrain/venv/bin/python3 scripts/make_parquet_reference.py --out DIR --big 2000000
//   lmtrain_bench --benchmark_filter=Parquet
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/parquet_source.h"

namespace lmt {
namespace {

void BM_ParquetDocuments(benchmark::State& state) {
  const char* file = std::getenv("LMT_PARQUET_BENCH_FILE");
  if (!file) {
    state.SkipWithError("set LMT_PARQUET_BENCH_FILE to a large Parquet file to measure");
    return;
  }
  const char* col = std::getenv("LMT_PARQUET_BENCH_COLUMN");
  int64_t docs = 0, bytes = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    docs = bytes = 0;
    SkippedRecords skipped;
    try {
      parquet_documents(file, col ? col : "text", &skipped, [&](std::string_view d) {
        ++docs;
        bytes += static_cast<int64_t>(d.size());
        if (!d.empty()) sum += static_cast<uint8_t>(d.back());  // touch the value
      });
    } catch (const UserError& e) {
      state.SkipWithError(e.what());
      return;
    }
  }
  benchmark::DoNotOptimize(sum);
  if (docs == 0) {
    state.SkipWithError("the file holds no documents");
    return;
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  state.counters["MB"] =
      benchmark::Counter(static_cast<double>(bytes) / 1e6 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["documents"] = static_cast<double>(docs);
  state.counters["peak_rss_MB"] = static_cast<double>(ru.ru_maxrss) / 1024.0;
}

BENCHMARK(BM_ParquetDocuments)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace lmt
