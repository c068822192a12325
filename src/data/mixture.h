// Deterministic weighted mixing of sources. An epoch draws as many samples as all sources hold
// together, N = sum of n_i, and gives source i the share w_i / sum(w) of them: c_i samples, the
// counts rounded by largest remainder so they sum to N exactly. A source drawn more often than
// it has samples repeats every sample equally often (plus a seeded selection for the rest); one
// drawn less often contributes a seeded selection. Sources are interleaved by weight (at every
// position the source furthest behind its share goes next, as Megatron-LM's blend does), and the
// whole epoch is then shuffled. Everything is a pure function of (seed, epoch, sizes, weights).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lmt {

// c_i for every source (see above). Sources with no samples get 0; the weights of the others are
// renormalised among themselves.
std::vector<int64_t> mixture_counts(std::span<const int64_t> sizes,
                                    std::span<const double> weights);

// The permutation of [0, n) used for shuffles: Fisher-Yates driven by Rng(seed, stream).
std::vector<int64_t> seeded_permutation(uint64_t seed, uint64_t stream, int64_t n);

// The epoch's order of global sample ids (source offset + local id; offsets = prefix sums of
// sizes), length sum(sizes).
std::vector<int64_t> epoch_order(uint64_t seed, int64_t epoch, std::span<const int64_t> sizes,
                                 std::span<const double> weights);

}  // namespace lmt
