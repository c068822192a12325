// The number of threads host work uses: OpenMP loops everywhere (data preparation, the CPU
// backend's kernels); the CPU backend keeps its BLAS library at the same number. One setting,
// train.threads (or --threads), so that nothing above the backends touches OpenMP or BLAS.
#pragma once

#include <cstdint>

namespace lmt {

// 0 = every core. Throws UserError for a negative count (named as train.threads).
void set_threads(int64_t threads);
// The threads host loops run with now.
int thread_count();

}  // namespace lmt
