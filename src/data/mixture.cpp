#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace lmt {

namespace {
// Philox stream offsets (kept apart from the streams parameter init uses).
constexpr uint64_t kShuffleStream = 0x4c4f414400000000ull;  // "LOAD" << 32, per epoch
constexpr uint64_t kSelectStream = 0x53454c4300000000ull;   // "SELC" << 32, per epoch and source
}  // namespace

std::vector<int64_t> seeded_permutation(uint64_t seed, uint64_t stream, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  Rng rng(seed, stream);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[i], p[static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1))]);
  return p;
}

std::vector<int64_t> mixture_counts(std::span<const int64_t> sizes,
                                    std::span<const double> weights) {
  LMT_CHECK(sizes.size() == weights.size());
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  double wsum = 0;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 0) wsum += weights[i];
  std::vector<int64_t> c(sizes.size(), 0);
  if (total == 0) return c;
  std::vector<std::pair<double, size_t>> rem;
  int64_t given = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    const double exact = static_cast<double>(total) * weights[i] / wsum;
    c[i] = static_cast<int64_t>(std::floor(exact));
    given += c[i];
    rem.push_back({exact - static_cast<double>(c[i]), i});
  }
  // Largest remainder first; ties go to the earlier source.
  std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total; ++k, ++given) ++c[rem[k % rem.size()].second];
  return c;
}

std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, std::span<const int64_t> sizes,
                                 std::span<const double> weights) {
  const std::vector<int64_t> counts = mixture_counts(sizes, weights);
  const size_t S = sizes.size();
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  // Each source's draws for this epoch, as global ids.
  std::vector<std::vector<int64_t>> draws(S);
  int64_t offset = 0;
  for (size_t i = 0; i < S; ++i) {
    const int64_t n = sizes[i], c = counts[i];
    auto& d = draws[i];
    d.reserve(static_cast<size_t>(c));
    for (int64_t r = 0; r + n <= c && n > 0; r += n)
      for (int64_t k = 0; k < n; ++k) d.push_back(offset + k);
    if (const int64_t rest = n > 0 ? c % n : 0; rest > 0) {
      std::vector<int64_t> p = seeded_permutation(
          seed, kSelectStream + (static_cast<uint64_t>(epoch) << 8) + i, n);
      for (int64_t k = 0; k < rest; ++k) d.push_back(offset + p[k]);
    }
    offset += n;
  }
  // Weighted interleave: the source furthest behind its share goes next.
  std::vector<int64_t> blend;
  blend.reserve(static_cast<size_t>(total));
  std::vector<int64_t> taken(S, 0);
  for (int64_t j = 0; j < total; ++j) {
    size_t best = 0;
    double best_err = -1e300;
    for (size_t i = 0; i < S; ++i) {
      if (taken[i] == counts[i]) continue;
      const double err = static_cast<double>(counts[i]) * static_cast<double>(j + 1) /
                             static_cast<double>(total) -
                         static_cast<double>(taken[i]);
      if (err > best_err) best_err = err, best = i;
    }
    blend.push_back(draws[best][static_cast<size_t>(taken[best]++)]);
  }
  // Shuffle the epoch.
  std::vector<int64_t> p =
      seeded_permutation(seed, kShuffleStream + static_cast<uint64_t>(epoch), total);
  std::vector<int64_t> order(static_cast<size_t>(total));
  for (int64_t j = 0; j < total; ++j) order[j] = blend[static_cast<size_t>(p[j])];
  return order;
}

}  // namespace lmt
