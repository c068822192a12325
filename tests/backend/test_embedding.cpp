// Embedding lookup and its scatter-add backward on the CPU backend: exact gathers, repeated ids
// accumulating onto a non-zero table gradient, bad ids rejected, thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "backend_test_util.h"

namespace lmt {
namespace {

template <class T>
void run_embedding(int64_t N, int64_t C, int64_t V) {
  SCOPED_TRACE(::testing::Message()
               << (sizeof(T) == 4 ? "f32" : "f64") << " N=" << N << " C=" << C << " V=" << V);
  CpuBackend be;
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * 7 + 3) % V);  // repeats
  const std::vector<double> table = test::randn(V * C, 1), dy = test::randn(N * C, 2);
  const std::vector<double> dtable0 = test::randn(V * C, 3);
  std::vector<double> want_dt = dtable0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) want_dt[ids[n] * C + c] += dy[n * C + c];

  std::vector<T> w = test::cast<T>(table), out(static_cast<size_t>(N * C));
  be.embedding_forward(dtype_of<T>(), out.data(), ids.data(), w.data(), N, C, V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], w[ids[n] * C + c]);
  std::vector<T> dt = test::cast<T>(dtable0), g = test::cast<T>(dy);
  be.embedding_backward(dtype_of<T>(), dt.data(), g.data(), ids.data(), N, C, V);
  test::expect_close(dt, want_dt, test::kTol<T>, "dtable");
}

TEST(Embedding, ForwardGathersBackwardScattersF32) {
  run_embedding<float>(7, 13, 5);
  run_embedding<float>(300, 200, 50);
}
TEST(Embedding, ForwardGathersBackwardScattersF64) {
  run_embedding<double>(7, 13, 5);
  run_embedding<double>(1, 1, 1);
}

// The forward copies rows of any dtype (a bf16 frozen base's table).
TEST(Embedding, ForwardGathersBf16Rows) {
  CpuBackend be;
  const int64_t V = 5, C = 7;
  std::vector<uint16_t> table(V * C), out(3 * C, 0xFFFF);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<uint16_t>(1000 + i);
  const std::vector<int32_t> ids = {4, 0, 4};
  be.embedding_forward(DType::bf16, out.data(), ids.data(), table.data(), 3, C, V);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[n * C + c], table[ids[n] * C + c]);
}

TEST(Embedding, RejectsIdsOutsideVocabulary) {
  CpuBackend be;
  std::vector<float> table(4 * 3), out(2 * 3);
  std::vector<int32_t> ids = {1, 4};
  EXPECT_THROW(be.embedding_backward(DType::f32, table.data(), out.data(), ids.data(), 2, 3, 4),
               InternalError);
  ids = {-1, 0};
  EXPECT_THROW(be.embedding_forward(DType::f32, out.data(), ids.data(), table.data(), 2, 3, 4),
               InternalError);
  ids = {0, 4};
  EXPECT_THROW(be.embedding_forward(DType::f32, out.data(), ids.data(), table.data(), 2, 3, 4),
               InternalError);
}

TEST(Embedding, BackwardIsIndependentOfThreadCount) {
  CpuBackend be;
  const int64_t N = 2000, C = 130, V = 17;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * n) % V);
  const std::vector<float> dy = test::cast<float>(test::randn(N * C, 4));
  std::vector<float> one(V * C, 0.25f), two(V * C, 0.25f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  be.embedding_backward(DType::f32, one.data(), dy.data(), ids.data(), N, C, V);
  omp_set_num_threads(std::max(2, threads));
  be.embedding_backward(DType::f32, two.data(), dy.data(), ids.data(), N, C, V);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace lmt
