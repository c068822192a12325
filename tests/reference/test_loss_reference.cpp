// Label smoothing against PyTorch's F.cross_entropy(label_smoothing=...) computed at test time
// (scripts/loss_reference.py) on fresh random logits with ignored rows: each row's loss and the
// gradient, on every backend (the CPU backend in float64 and float32, PJRT through XLA's CPU
// plugin in float32), with the chunked head too (the same loss through Backend::cross_entropy).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "reference_util.h"

namespace lmt {
namespace {

std::vector<double> read_f64(const std::string& path, size_t n) {
  std::vector<double> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 8));
  EXPECT_TRUE(in) << path;
  return v;
}

TEST(LossReference, LabelSmoothingMatchesPyTorchOnEveryBackend) {
  const uint32_t seed = test::fresh_seed("LossReference.LabelSmoothing");
  const int64_t N = 12, V = 57;
  const double gs = 1.0 / 9;
  const std::vector<double> x = test::randn(N * V, seed, 0, 3.0);
  std::vector<int32_t> labels(N);
  Rng rng(seed, 1);
  for (int64_t i = 0; i < N; ++i)
    labels[i] = i % 4 == 1 ? -100 : static_cast<int32_t>(rng.below(V));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lmt_loss_reference_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove_all(p); }
  } cleanup{dir};
  const std::string in = (dir / "in.bin").string(), out = (dir / "out.bin").string();
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * 8));
    f.write(reinterpret_cast<const char*>(labels.data()), static_cast<std::streamsize>(N * 4));
  }
  const std::vector<std::unique_ptr<Backend>> backends = test::parity_backends();
  for (double eps : {0.1, 0.35}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", label_smoothing " << eps);
    ASSERT_NO_FATAL_FAILURE(test::run_reference_script(
        "scripts/loss_reference.py", fmt::format("'{}' '{}' {} {} {} {}", in, out, N, V, eps, gs)));
    const std::vector<double> ref = read_f64(out, static_cast<size_t>(N + N * V));
    const std::vector<double> want_loss(ref.begin(), ref.begin() + N),
        want_grad(ref.begin() + N, ref.end());
    const LossSpec spec{eps, 0, 0};
    for (const std::unique_ptr<Backend>& be : backends)
      for (DType dt : {DType::f64, DType::f32}) {
        if (dt == DType::f64 && be->name() != "cpu") continue;
        SCOPED_TRACE(::testing::Message() << be->name() << " " << dtype_name(dt));
        const size_t es = dtype_size(dt);
        Buffer logits(be.get(), x.size() * es), losses(be.get(), N * es),
            lab(be.get(), N * sizeof(int32_t));
        std::vector<float> xf(x.begin(), x.end());
        be->from_host(logits.data(),
                      dt == DType::f64 ? static_cast<const void*>(x.data()) : xf.data(),
                      logits.bytes());
        be->from_host(lab.data(), labels.data(), lab.bytes());
        be->cross_entropy(dt, logits.data(), losses.data(), static_cast<const int32_t*>(lab.data()),
                          N, V, -100, gs, 0.0, spec);
        std::vector<double> got_loss(N), got_grad(x.size());
        if (dt == DType::f64) {
          be->to_host(got_loss.data(), losses.data(), losses.bytes());
          be->to_host(got_grad.data(), logits.data(), logits.bytes());
        } else {
          std::vector<float> l(N), g(x.size());
          be->to_host(l.data(), losses.data(), losses.bytes());
          be->to_host(g.data(), logits.data(), logits.bytes());
          got_loss.assign(l.begin(), l.end());
          got_grad.assign(g.begin(), g.end());
        }
        const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
        test::expect_close(got_loss, want_loss, tol, "losses");
        test::expect_close(got_grad, want_grad, tol, "gradient");
      }
  }
}

}  // namespace
}  // namespace lmt
