// Throughput of the token store, for docs/performance.md: the writer's MB/s (finish() and its
// fsync included) and random samples per second through a packing plan and fill_sample (the
// .bin in the page cache). Disabled in CI; run with
//   test_store --gtest_also_run_disabled_tests --gtest_filter='*Perf*'
// LMT_STORE_PERF_TOKENS sets the store size (default 64M tokens), LMT_STORE_PERF_DIR its folder.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "data/packing.h"
#include "data/token_store.h"
#include "store_test_util.h"

namespace lmt {
namespace {

using namespace store_test;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void measure_reads(const TokenStore& s, const std::vector<int64_t>& lengths, PackingMode mode,
                   int64_t seq_len, std::mt19937_64& rng) {
  auto t0 = Clock::now();
  PackingPlan plan(lengths, 0, static_cast<int64_t>(lengths.size()), seq_len, mode);
  const double plan_s = seconds_since(t0);
  std::vector<int32_t> ids(seq_len), labels(seq_len), pos(seq_len), starts;
  int64_t n = 0, checksum = 0;
  t0 = Clock::now();
  while (seconds_since(t0) < 1.0) {
    for (int k = 0; k < 64; ++k, ++n) {
      int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(plan.num_samples()));
      fill_sample(s, plan.pieces(i), seq_len, ids.data(), labels.data(), pos.data(), &starts);
      checksum += ids[0] + labels[seq_len - 1];
    }
  }
  const double dt = seconds_since(t0);
  std::cout << "[ perf     ] " << (mode == PackingMode::kBin ? "bin" : "continue") << " seq_len "
            << seq_len << ": plan of " << lengths.size() << " documents in " << plan_s * 1e3
            << " ms, " << plan.num_samples() << " samples; " << n / dt << " random samples/s ("
            << n * seq_len / dt / 1e6 << " M tokens/s) [" << checksum << "]\n";
}

TEST(StorePerf, DISABLED_WriterAndRandomReads) {
  int64_t total = int64_t{64} << 20;
  if (const char* e = std::getenv("LMT_STORE_PERF_TOKENS")) total = std::atoll(e);
  std::mt19937_64 rng(fresh_seed());
  const char* where = std::getenv("LMT_STORE_PERF_DIR");  // e.g. /dev/shm: the CPU cost alone
  TempDir dir(where ? where : "");
  std::cout << "[ perf     ] store in " << dir.path() << "\n";
  for (StoreDtype dtype : {StoreDtype::kUInt16, StoreDtype::kInt32}) {
    // Documents of 1..4000 tokens (mean ~2000), ids below 50257.
    std::vector<int32_t> doc(4000);
    std::vector<uint8_t> mask(4000, 1);
    for (auto& t : doc) t = static_cast<int32_t>(rng() % 50257);
    std::vector<int64_t> lengths;
    const std::string prefix = dir / ("perf" + std::to_string(static_cast<int>(dtype)));
    auto t0 = Clock::now();
    double append_s = 0;
    {
      TokenStoreWriter w(prefix, dtype, true);
      for (int64_t written = 0; written < total;) {
        size_t len = 1 + rng() % doc.size();
        w.add_document(std::span(doc.data(), len), std::span(mask.data(), len));
        lengths.push_back(static_cast<int64_t>(len));
        written += static_cast<int64_t>(len);
      }
      append_s = seconds_since(t0);
      w.finish();
    }
    const double dt = seconds_since(t0);
    int64_t tokens = 0;
    for (int64_t l : lengths) tokens += l;
    const double mb = static_cast<double>(tokens) * (store_dtype_size(dtype) + 1) / 1e6;
    std::cout << "[ perf     ] writer " << store_dtype_name(dtype) << " + mask: " << tokens
              << " tokens, " << mb << " MB in " << dt << " s = " << mb / dt << " MB/s ("
              << tokens / dt / 1e6 << " M tokens/s); add_document " << append_s
              << " s, finish (fsync) " << dt - append_s << " s\n";
    t0 = Clock::now();
    TokenStore s(prefix);
    std::cout << "[ perf     ] open + validate " << lengths.size()
              << " documents: " << seconds_since(t0) * 1e3 << " ms\n";
    ASSERT_EQ(s.num_tokens(), tokens);
    measure_reads(s, lengths, PackingMode::kContinue, 2048, rng);
    measure_reads(s, lengths, PackingMode::kBin, 4096, rng);
  }
}

}  // namespace
}  // namespace lmt
