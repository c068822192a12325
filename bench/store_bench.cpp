// Token store throughput, for docs/performance.md: the writer's MB/s (finish() and its fsync
// included) and random samples per second through a packing plan and fill_sample (the .bin in the
// page cache). Before timing, the store written is opened and its token count checked.
//   lmtrain_bench --benchmark_filter=Store
// LMT_STORE_BENCH_TOKENS sets the store size (default 64M tokens), LMT_STORE_BENCH_DIR its folder
// (e.g. /dev/shm for the CPU cost alone; default the system's temporary directory).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/packing.h"
#include "data/token_store.h"

namespace lmt {
namespace {

int64_t bench_tokens() {
  const char* e = std::getenv("LMT_STORE_BENCH_TOKENS");
  return e ? std::atoll(e) : int64_t{64} << 20;
}

// One store per dtype, written once per process and removed at exit.
struct BenchStore {
  std::string dir, prefix;
  std::vector<int64_t> lengths;
  int64_t tokens = 0;
  ~BenchStore() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// Documents of 1..4000 tokens (mean ~2000), ids below 50257, a loss mask of ones.
void write_store(BenchStore* s, StoreDtype dtype, std::mt19937_64& rng) {
  std::vector<int32_t> doc(4000);
  std::vector<uint8_t> mask(doc.size(), 1);
  for (auto& t : doc) t = static_cast<int32_t>(rng() % 50257);
  s->lengths.clear();
  s->tokens = 0;
  TokenStoreWriter w(s->prefix, dtype, true);
  while (s->tokens < bench_tokens()) {
    const size_t len = 1 + rng() % doc.size();
    w.add_document(std::span(doc.data(), len), std::span(mask.data(), len));
    s->lengths.push_back(static_cast<int64_t>(len));
    s->tokens += static_cast<int64_t>(len);
  }
  w.finish();
}

BenchStore& store(StoreDtype dtype) {
  static std::unique_ptr<BenchStore> stores[2];
  auto& s = stores[dtype == StoreDtype::kInt32];
  if (!s) {
    s = std::make_unique<BenchStore>();
    const char* where = std::getenv("LMT_STORE_BENCH_DIR");
    std::string tmpl =
        (std::filesystem::path(where ? where : std::filesystem::temp_directory_path()) /
         "lmt_store_bench_XXXXXX")
            .string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + tmpl);
    s->dir = tmpl;
    s->prefix = s->dir + "/store";
    std::mt19937_64 rng(1);
    write_store(s.get(), dtype, rng);
    if (TokenStore(s->prefix).num_tokens() != s->tokens)
      throw std::runtime_error("store_bench: the store does not hold what was written");
  }
  return *s;
}

StoreDtype dtype_arg(int64_t a) {
  return a == 0 ? StoreDtype::kUInt16 : StoreDtype::kInt32;
}

void BM_StoreWriter(benchmark::State& state) {
  const StoreDtype dtype = dtype_arg(state.range(0));
  BenchStore& s = store(dtype);
  std::mt19937_64 rng(2);
  for (auto _ : state) write_store(&s, dtype, rng);
  const double bytes = static_cast<double>(s.tokens) * (store_dtype_size(dtype) + 1);
  state.counters["MB"] = benchmark::Counter(bytes / 1e6 * static_cast<double>(state.iterations()),
                                            benchmark::Counter::kIsRate);
  state.counters["Mtokens"] = benchmark::Counter(
      static_cast<double>(s.tokens) / 1e6 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.SetLabel(std::string(store_dtype_name(dtype)) + " + mask");
}

// args: dtype (0 uint16, 1 int32), packing (0 continue, 1 bin), seq_len.
void BM_StoreRandomSamples(benchmark::State& state) {
  BenchStore& s = store(dtype_arg(state.range(0)));
  const TokenStore ts(s.prefix);
  const PackingMode mode = state.range(1) == 0 ? PackingMode::kContinue : PackingMode::kBin;
  const int64_t seq_len = state.range(2);
  const PackingPlan plan(s.lengths, 0, static_cast<int64_t>(s.lengths.size()), seq_len, mode);
  std::vector<int32_t> ids(seq_len), labels(seq_len), pos(seq_len), starts;
  std::mt19937_64 rng(3);
  int64_t checksum = 0;
  for (auto _ : state) {
    const auto i = static_cast<int64_t>(rng() % static_cast<uint64_t>(plan.num_samples()));
    fill_sample(ts, plan.pieces(i), seq_len, ids.data(), labels.data(), pos.data(), &starts);
    checksum += ids[0] + labels[seq_len - 1];
  }
  benchmark::DoNotOptimize(checksum);
  state.counters["samples"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["Mtokens"] = benchmark::Counter(
      static_cast<double>(state.iterations() * seq_len) / 1e6, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(mode == PackingMode::kBin ? "bin" : "continue") + ", plan of " +
                 std::to_string(s.lengths.size()) + " documents");
}

BENCHMARK(BM_StoreWriter)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StoreRandomSamples)
    ->Args({0, 0, 2048})
    ->Args({0, 1, 4096})
    ->Args({1, 0, 2048})
    ->Args({1, 1, 4096})
    ->UseRealTime();

}  // namespace
}  // namespace lmt
