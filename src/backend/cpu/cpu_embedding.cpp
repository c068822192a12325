// Token embedding lookup and its backward for the CPU backend. The backward scatters rows that may
// repeat (the same token twice in a batch), so threads split the channels, not the rows: each
// thread owns a slice of columns of dtable and adds the rows in token order, which is race-free and
// gives the same bits for any thread count.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

// out[N,C] = table[ids[n], :]: a row copy, so any dtype (a bf16 frozen base's table too).
void CpuBackend::embedding_forward(DType dt, void* out, const int32_t* ids, const void* table,
                                   int64_t N, int64_t C, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    LMT_CHECK(ids[n] >= 0 && ids[n] < V,
              "CpuBackend::embedding_forward: id " + std::to_string(ids[n]) + " at row " +
                  std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
  const size_t row = static_cast<size_t>(C) * dtype_size(dt);
  auto* y = static_cast<char*>(out);
  const auto* w = static_cast<const char*>(table);
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(y + static_cast<size_t>(n) * row, w + static_cast<size_t>(ids[n]) * row, row);
}

// dtable[V,C] += dout[N,C] scattered by ids[N].
void CpuBackend::embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids,
                                    int64_t N, int64_t C, int64_t V) {
  cpu::dispatch_compute(dt, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t n = 0; n < N; ++n)
      LMT_CHECK(ids[n] >= 0 && ids[n] < V,
                "CpuBackend::embedding_backward: id " + std::to_string(ids[n]) + " at row " +
                    std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
    T* dw = static_cast<T*>(dtable);
    const T* dy = static_cast<const T*>(dout);
    constexpr int64_t kCols = 64;  // a channel slice: one cache line of doubles, four of floats
    const int64_t slices = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t c0 = s * kCols, nc = std::min(kCols, C - c0);
      for (int64_t n = 0; n < N; ++n) {
        T* dst = dw + static_cast<int64_t>(ids[n]) * C + c0;
        const T* src = dy + n * C + c0;
        for (int64_t c = 0; c < nc; ++c) dst[c] = dst[c] + src[c];
      }
    }
  });
}

}  // namespace lmt
