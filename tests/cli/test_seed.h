// The seed of a randomised test: fresh on every run, printed, and replayed with
// LMTRAIN_TEST_SEED=N (the reference tier's Python tests read the same variable).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

namespace lmt::test {

// A fresh seed per run (LMTRAIN_TEST_SEED replays one), printed so a failure can be replayed.
inline uint32_t fresh_seed(const std::string& what) {
  static const uint32_t run_seed = [] {
    const char* s = std::getenv("LMTRAIN_TEST_SEED");
    return s ? static_cast<uint32_t>(std::stoul(s)) : std::random_device{}() % 2000000000u + 1;
  }();
  const uint32_t seed =
      static_cast<uint32_t>((run_seed + std::hash<std::string>{}(what)) % 2000000000u) + 1;
  std::printf("[%s] seed %u (LMTRAIN_TEST_SEED=%u)\n", what.c_str(), seed, run_seed);
  return seed;
}

}  // namespace lmt::test
