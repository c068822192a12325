// Shared by the optimizer tests: comparing an f32 result with a double-precision reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace lmt::test {

// |got - want| <= rel * (|want| + rms(want)): relative, but measured against the quantity's
// typical size where cancellation (m sums gradients of both signs) makes an element small.
inline void expect_close_rms(const std::vector<float>& got, const std::vector<double>& want,
                             double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double ss = 0;
  for (double w : want) ss += w * w;
  const double rms = std::sqrt(ss / static_cast<double>(want.size()));
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(got[i] - want[i]) <= rel * (std::abs(want[i]) + rms))) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", reference " << want[i];
      ++bad;
    }
}

}  // namespace lmt::test
