// PyRandom against CPython's random.Random (tests/eval/random_reference.py) for fresh seeds,
// negative and 64-bit seeds, and sample() sizes on both sides of its set-or-pool rule.
#include <gtest/gtest.h>

#include "eval/py_random.h"
#include "eval_test_util.h"

namespace lmt::eval {
namespace {

TEST(PyRandomReference, MatchesCPythonForManySeedsAndSizes) {
  std::mt19937_64 gen(test::fresh_seed("PyRandomReference"));
  std::vector<int64_t> seeds = {
      0, 1, 42, 1234, -7, int64_t(1) << 32, (int64_t(1) << 62) + 12345, 4294967295LL};
  for (int i = 0; i < 40; ++i) seeds.push_back(int64_t(gen() >> 1) >> (gen() % 63));
  // (n, k): k <= 5 keeps setsize 21; k = 6 makes it 21 + 64 = 85; n around those bounds picks
  // the pool (n <= setsize) or the set algorithm.
  std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1},    {5, 0},     {21, 5},    {22, 5},
                                                    {22, 2},   {85, 6},    {86, 6},    {200, 6},
                                                    {1000, 3}, {1000, 40}, {100, 100}, {5000, 350}};
  for (int i = 0; i < 20; ++i) {
    const int64_t n = 1 + int64_t(gen() % 3000);
    sizes.push_back({n, int64_t(gen() % (n + 1))});
  }
  nlohmann::json spec = {{"seeds", seeds}, {"samples", nlohmann::json::array()}};
  for (auto [n, k] : sizes) spec["samples"].push_back({n, k});
  test::ScratchDir dir("random");
  const nlohmann::json ref = test::run_eval_reference("random_reference.py", spec, dir.path());
  ASSERT_EQ(ref.size(), seeds.size());
  for (size_t s = 0; s < seeds.size(); ++s) {
    SCOPED_TRACE("seed " + std::to_string(seeds[s]));
    PyRandom r(seeds[s]);
    const auto& want = ref[s];
    for (int i = 0; i < 3; ++i) EXPECT_EQ(r.random(), want["random"][i].get<double>());
    const int bits[] = {1, 17, 32, 33, 64};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(r.getrandbits(bits[i]), want["bits"][i].get<uint64_t>());
    EXPECT_EQ(r.randbelow(1000), want["below"][0].get<int64_t>());
    EXPECT_EQ(r.randbelow((int64_t(1) << 40) + 3), want["below"][1].get<int64_t>());
    std::vector<int64_t> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    r.shuffle(x);
    EXPECT_EQ(x, want["shuffle"].get<std::vector<int64_t>>());
    for (size_t i = 0; i < sizes.size(); ++i)
      ASSERT_EQ(r.sample(sizes[i].first, sizes[i].second),
                want["samples"][i].get<std::vector<int64_t>>())
          << "sample(range(" << sizes[i].first << "), " << sizes[i].second << ")";
  }
}

}  // namespace
}  // namespace lmt::eval
