// Backend::head_loss on every backend (the CPU backend and PJRT through XLA's CPU plugin): the
// cut cross-entropy (the head's product fused with the loss, tiles of rows by vocabulary) equals
// the chunked loss, values and both gradients (the hidden states' and the head's), on fresh random
// inputs with ignored labels, chunks and tiles that do not divide N and V, the soft-cap on and
// off, and a loss that is not plain (every term of backend/loss.h). The reference is the CPU
// backend's chunked loss in double.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "cli/test_seed.h"

namespace lmt {
namespace {

struct HeadLossResult {
  double loss = 0, ce = 0;
  std::vector<double> dh, dw;
};

struct HeadLossInputs {
  int64_t N, C, V;
  std::vector<double> h, w;
  std::vector<int32_t> labels;
};

// One head_loss call on `be` in dtype dt, inputs uploaded and results read back in double.
HeadLossResult run_head_loss(Backend* be, DType dt, const HeadLossInputs& in, HeadLossArgs a) {
  a.N = in.N, a.C = in.C, a.V = in.V;
  auto upload = [&](const std::vector<double>& v) {
    Buffer b(be, v.size() * dtype_size(dt));
    if (dt == DType::f64) {
      be->from_host(b.data(), v.data(), b.bytes());
    } else {
      const std::vector<float> f = test::cast<float>(v);
      be->from_host(b.data(), f.data(), b.bytes());
    }
    return b;
  };
  auto download = [&](const Buffer& b, size_t n) {
    std::vector<double> out(n);
    if (dt == DType::f64) {
      be->to_host(out.data(), b.data(), n * 8);
    } else {
      std::vector<float> f(n);
      be->to_host(f.data(), b.data(), n * 4);
      out.assign(f.begin(), f.end());
    }
    return out;
  };
  const Buffer h = upload(in.h), w = upload(in.w);
  Buffer labels(be, in.labels.size() * 4);
  be->from_host(labels.data(), in.labels.data(), labels.bytes());
  Buffer sums(be, 2 * sizeof(double));
  be->zero(sums.data(), sums.bytes());
  Buffer ce_sum(be, sizeof(double));
  be->zero(ce_sum.data(), ce_sum.bytes());
  const size_t es = dtype_size(dt);
  Buffer dh(be, in.h.size() * es), dw(be, in.w.size() * es);
  be->zero(dw.data(), dw.bytes());
  const HeadLossScratch s = head_loss_scratch(std::min(a.chunk, in.N), in.V, a.vocab_tile);
  Buffer logits(be, static_cast<size_t>(s.logits) * es),
      losses(be, static_cast<size_t>(s.losses) * (dt == DType::f64 ? 8 : 4));
  be->head_loss(dt, a, h.data(), w.data(), static_cast<const int32_t*>(labels.data()),
                static_cast<double*>(sums.data()), dh.data(), dw.data(), logits.data(),
                losses.data(), static_cast<double*>(ce_sum.data()));
  HeadLossResult r;
  be->to_host(&r.loss, sums.data(), 8);
  be->to_host(&r.ce, ce_sum.data(), 8);
  r.dh = download(dh, in.h.size());
  r.dw = download(dw, in.w.size());
  return r;
}

TEST(HeadLoss, CutCrossEntropyEqualsTheChunkedLossOnEveryBackend) {
  const uint32_t seed = test::fresh_seed("HeadLoss.CutCrossEntropyEqualsTheChunkedLoss");
  HeadLossInputs in{37, 16, 103, {}, {}, {}};
  in.h = test::randn(in.N * in.C, seed, 0, 1.0);
  in.w = test::randn(in.V * in.C, seed, 1, 0.5);
  Rng rng(seed, 2);
  for (int64_t i = 0; i < in.N; ++i)
    in.labels.push_back(i % 5 == 3 ? -100 : static_cast<int32_t>(rng.next_u64() % in.V));
  in.labels[in.N - 1] = static_cast<int32_t>(in.V - 1);  // the clamped last tile's own id
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  for (double cap : {0.0, 5.0})
    for (const LossSpec& spec : {LossSpec{}, LossSpec{0.1, 0.02, 2.0}}) {
      HeadLossArgs a;
      a.chunk = 8;  // 5 chunks, the last of 5 rows
      a.grad_scale = 1.0 / 29;
      a.softcap = cap;
      a.loss = spec;
      const HeadLossResult want = run_head_loss(cpu.get(), DType::f64, in, a);
      for (const std::unique_ptr<Backend>& be : test::parity_backends())
        for (int64_t tile : {int64_t{0}, int64_t{24}, int64_t{100}}) {
          SCOPED_TRACE(::testing::Message()
                       << "seed " << seed << ", " << be->name() << ", softcap " << cap
                       << ", loss plain " << spec.plain() << ", vocab_tile " << tile);
          a.vocab_tile = tile;  // 0: chunked; 24: 5 tiles, the last clamped; 100: 2 tiles
          std::vector<DType> dts = {DType::f32};
          if (be->name() == "cpu") dts.push_back(DType::f64);
          for (DType dt : dts) {
            const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
            const HeadLossResult got = run_head_loss(be.get(), dt, in, a);
            test::expect_close(std::vector<double>{got.loss}, {want.loss}, tol, "loss sum");
            test::expect_close(std::vector<double>{got.ce}, {want.ce}, tol, "ce sum");
            test::expect_close(got.dh, want.dh, tol, "dh");
            test::expect_close(got.dw, want.dw, tol, "dw");
          }
        }
      if (spec.plain())
        EXPECT_DOUBLE_EQ(want.loss, want.ce);
      else
        EXPECT_GT(std::abs(want.loss - want.ce), 1e-3);
    }
}

}  // namespace
}  // namespace lmt
