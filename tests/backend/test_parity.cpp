// The backend parity harness (as ggml's test-backend-ops): one table of cases, each naming an
// operation of the kernel interface, its shapes and its float32 tolerance. For every case:
// - every backend in parity_backends() runs the forward in float32 through device buffers and
//   matches the CPU backend in float64 (the reference);
// - the CPU backend's float64 backward matches central finite differences of
//   L = sum_k R_k * out_k (R random; a case whose kernel takes one scale for all rows, such as
//   cross-entropy, uses a constant R);
// - every backend's float32 backward matches the CPU backend's float64 one.
// A new backend joins by being added to test::parity_backends() (backend_test_util.h); a new
// kernel, by a row in cases().
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "bf16_products.h"
#include "core/rng.h"
#include "optim/muon.h"
#include "test_util.h"

namespace lmt {
namespace {

using test::expect_close;

// One tensor of a case: its element count and how its values are drawn. ids are i32 in [0, range)
// (-100, an ignored label, at every ignore-th element when `ignore` > 0); freqs are f32 in any
// run (RoPE's table), around 1 as positive values are.
struct Spec {
  int64_t n = 0;
  enum Kind { normal, positive, ids, freqs } kind = normal;
  int64_t range = 0;
  int ignore = 0;
  bool aux = false;   // outputs: saved for backward (rstd, lse), not part of L; inputs: no gradient
  bool stat = false;  // an output in the statistics' dtype (as aux outputs are): the losses
};

// Device buffers of one run: floats in the run's dtype, ids as i32.
struct Run {
  Backend* be;
  DType dt;
  std::vector<void*> in, out, din, dout;
  std::vector<int64_t> in_n;  // element counts of the inputs
  int64_t f32_n(int i) const { return in_n[static_cast<size_t>(i)]; }
};

struct Case {
  std::string name;
  std::vector<Spec> in, out;
  double tol = 1e-5;  // float32 against float64, relative to the largest element (expect_close)
  std::function<void(Run&)> forward;
  std::function<void(Run&)> backward;  // reads dout, writes din (zeroed first); null: none
  bool uniform_dout = false;
  // An f32-only kernel (the optimizers' steps): the reference is the CPU backend in f32, and
  // there is no backward.
  bool f32_only = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// The dtype a tensor of a case has in a run of dtype dt: ids i32, RoPE's table f32, statistics
// f32 (f64 in an f64 run), the rest dt.
DType elem(const Spec& s, DType dt) {
  if (s.kind == Spec::ids) return DType::i32;
  if (s.kind == Spec::freqs) return DType::f32;
  if (s.aux || s.stat) return dt == DType::f64 ? DType::f64 : DType::f32;
  return dt;
}

size_t esize(const Spec& s, DType dt) {
  return static_cast<size_t>(s.n) * dtype_size(elem(s, dt));
}

std::vector<double> draw(const Spec& s, uint64_t seed) {
  const bool positive = s.kind == Spec::positive || s.kind == Spec::freqs;
  std::vector<double> v = test::randn(s.n, seed, 0, positive ? 0.3 : 1.0);
  if (positive)
    for (double& x : v) x = 1.0 + x;
  if (s.kind == Spec::ids) {
    Rng r(seed, 1);
    for (int64_t i = 0; i < s.n; ++i)
      v[i] = s.ignore > 0 && i % s.ignore == s.ignore - 1 ? -100.0
                                                          : static_cast<double>(r.below(s.range));
  }
  return v;
}

void upload(Backend& be, DType dt, const Spec& s, void* dst, const std::vector<double>& v) {
  std::vector<char> h(esize(s, dt));
  for (size_t i = 0; i < v.size(); ++i)
    store_element(elem(s, dt), h.data(), static_cast<int64_t>(i), v[i]);
  be.from_host(dst, h.data(), h.size());
}

std::vector<double> download(Backend& be, DType dt, const Spec& s, const void* src) {
  std::vector<char> h(esize(s, dt));
  be.to_host(h.data(), src, h.size());
  std::vector<double> v(static_cast<size_t>(s.n));
  for (int64_t i = 0; i < s.n; ++i)
    v[static_cast<size_t>(i)] = load_element(elem(s, dt), h.data(), i);
  return v;
}

// Runs a case on `be` in `dt` from host inputs; returns outputs and (with dout) input gradients.
struct Result {
  std::vector<std::vector<double>> out, din;
};
Result run(const Case& c, Backend& be, DType dt, const std::vector<std::vector<double>>& in,
           const std::vector<std::vector<double>>* dout) {
  std::vector<Buffer> keep;
  Run r{&be, dt, {}, {}, {}, {}, {}};
  for (const Spec& s : c.in) r.in_n.push_back(s.n);
  auto alloc = [&](const Spec& s) {
    keep.emplace_back(&be, std::max<size_t>(esize(s, dt), 1));
    return keep.back().data();
  };
  for (size_t i = 0; i < c.in.size(); ++i) {
    r.in.push_back(alloc(c.in[i]));
    upload(be, dt, c.in[i], r.in.back(), in[i]);
  }
  for (const Spec& s : c.out) r.out.push_back(alloc(s));
  c.forward(r);
  Result res;
  for (size_t i = 0; i < c.out.size(); ++i) res.out.push_back(download(be, dt, c.out[i], r.out[i]));
  if (!dout) return res;
  for (size_t i = 0; i < c.out.size(); ++i) {
    r.dout.push_back(alloc(c.out[i]));
    upload(be, dt, c.out[i], r.dout.back(), (*dout)[i]);
  }
  for (const Spec& s : c.in) r.din.push_back(alloc(s));  // zero-filled by alloc
  c.backward(r);
  for (size_t i = 0; i < c.in.size(); ++i)
    res.din.push_back(c.in[i].aux || c.in[i].kind != Spec::normal && c.in[i].kind != Spec::positive
                          ? std::vector<double>{}
                          : download(be, dt, c.in[i], r.din[i]));
  return res;
}

// ---- the cases ----

void* ptr(void* base, int64_t elems, DType dt) {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * dtype_size(dt);
}
const int32_t* ids_of(const Run& r, int i) {
  return static_cast<const int32_t*>(r.in[i]);
}

Case gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, double beta) {
  Case c;
  c.name = "gemm" + std::string(ta ? " A^T" : "") + (tb ? " B^T" : "") + " " + std::to_string(M) +
           "x" + std::to_string(N) + "x" + std::to_string(K);
  c.in = {{M * K}, {K * N}, {M * N}};
  c.out = {{M * N}};
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  c.forward = [=](Run& r) {
    r.be->copy(r.out[0], r.in[2], static_cast<size_t>(M * N) * dtype_size(r.dt));
    r.be->gemm(r.dt, ta, tb, M, N, K, alpha, r.in[0], lda, r.in[1], ldb, beta, r.out[0], N);
  };
  c.backward = [=](Run& r) {
    if (!ta)  // dA = alpha dC op(B)^T
      r.be->gemm(r.dt, false, !tb, M, K, N, alpha, r.dout[0], N, r.in[1], ldb, 0, r.din[0], K);
    else  // dA^T = alpha op(B) dC^T
      r.be->gemm(r.dt, tb, true, K, M, N, alpha, r.in[1], ldb, r.dout[0], N, 0, r.din[0], M);
    if (!tb)  // dB = alpha op(A)^T dC
      r.be->gemm(r.dt, !ta, false, K, N, M, alpha, r.in[0], lda, r.dout[0], N, 0, r.din[1], N);
    else  // dB^T = alpha dC^T op(A)
      r.be->gemm(r.dt, true, ta, N, K, M, alpha, r.dout[0], N, r.in[0], lda, 0, r.din[1], K);
    r.be->accumulate(r.dt, r.din[2], r.dout[0], M * N);
    r.be->scale(r.dt, r.din[2], beta, M * N);
  };
  return c;
}

Case norm_case(bool layer, int64_t N, int64_t C, double offset) {
  Case c;
  c.name = std::string(layer ? "layernorm " : "rmsnorm ") + std::to_string(N) + "x" +
           std::to_string(C) + (offset != 0 ? " offset 1" : "");
  if (layer) {
    c.in = {{N * C}, {C, Spec::positive}, {C}};
    c.out = {{N * C}, {N, Spec::normal, 0, 0, true}, {N, Spec::normal, 0, 0, true}};
    c.forward = [=](Run& r) {
      r.be->layernorm_forward(r.dt, r.out[0], r.out[1], r.out[2], r.in[0], r.in[1], r.in[2], N, C,
                              1e-5);
    };
    c.backward = [=](Run& r) {
      r.be->layernorm_backward(r.dt, r.din[0], r.din[1], r.din[2], r.dout[0], r.in[0], r.in[1],
                               r.out[1], r.out[2], N, C);
    };
  } else {
    c.in = {{N * C}, {C, offset != 0 ? Spec::normal : Spec::positive}};
    c.out = {{N * C}, {N, Spec::normal, 0, 0, true}};
    c.forward = [=](Run& r) {
      r.be->rmsnorm_forward(r.dt, r.out[0], r.out[1], r.in[0], r.in[1], N, C, 1e-6, offset);
    };
    c.backward = [=](Run& r) {
      r.be->rmsnorm_backward(r.dt, r.din[0], r.din[1], r.dout[0], r.in[0], r.in[1], r.out[1], N, C,
                             offset);
    };
  }
  return c;
}

Case attention_case(const std::string& name, int64_t B, int64_t T, int Hq, int Hkv, int D,
                    int64_t window, double softcap, bool docs) {
  Case c;
  c.name = "attention " + name;
  const int64_t Q = Hq * D, KV = Hkv * D;
  c.in = {{B * T * Q}, {B * T * KV}, {B * T * KV}};
  c.out = {{B * T * Q}, {B * Hq * T, Spec::normal, 0, 0, true}};
  auto starts = std::make_shared<std::vector<int32_t>>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      starts->push_back(docs && t >= T / 3 ? static_cast<int32_t>(T / 3) : 0);
  // doc_start is a device array of the backend that runs the case.
  auto args = [=](Backend& be, std::shared_ptr<Buffer>& dev) {
    if (docs) {
      dev = std::make_shared<Buffer>(&be, starts->size() * sizeof(int32_t));
      be.from_host(dev->data(), starts->data(), dev->bytes());
    }
    AttentionArgs a;
    a.batch = B, a.q_len = T, a.kv_len = T, a.num_heads = Hq, a.num_kv_heads = Hkv, a.head_dim = D;
    a.q_row_stride = Q, a.q_batch_stride = T * Q;
    a.kv_row_stride = KV, a.kv_batch_stride = T * KV;
    a.out_row_stride = Q, a.out_batch_stride = T * Q;
    a.scale = 1.0 / std::sqrt(static_cast<double>(D));
    a.softcap = softcap, a.window = window;
    a.doc_start = docs ? dev->as<int32_t>() : nullptr;
    return a;
  };
  c.forward = [=](Run& r) {
    std::shared_ptr<Buffer> dev;
    r.be->attention_forward(r.dt, args(*r.be, dev), r.out[0], r.out[1], r.in[0], r.in[1], r.in[2]);
  };
  c.backward = [=](Run& r) {
    std::shared_ptr<Buffer> dev;
    r.be->attention_backward(r.dt, args(*r.be, dev), r.din[0], r.din[1], r.din[2], r.dout[0],
                             r.in[0], r.in[1], r.in[2], r.out[0], r.out[1]);
  };
  return c;
}

float* f32_at(const Run& r, int i, bool out) {
  return static_cast<float*>(out ? r.out[static_cast<size_t>(i)] : r.in[static_cast<size_t>(i)]);
}

// A kernel's small device array (an optimizer's factors, a dropout key) on the run's backend.
template <class T, size_t N>
Buffer on_device(const Run& r, const std::array<T, N>& v) {
  Buffer b(r.be, sizeof v);
  r.be->from_host(b.data(), v.data(), sizeof v);
  return b;
}

// An optimizer kernel: outputs start as copies of the inputs they update in place (`updated`:
// output k copies input updated[k]); `step` runs the kernel on them with a device gradient scale
// of 0.7 (a clipped step).
Case optimizer_case(const std::string& name, std::vector<Spec> in, std::vector<int> updated,
                    std::vector<Spec> extra_out,
                    std::function<void(Run&, const double* scale)> step) {
  Case c;
  c.name = name;
  c.in = std::move(in);
  for (int k : updated) c.out.push_back({c.in[static_cast<size_t>(k)].n});
  for (const Spec& e : extra_out) c.out.push_back(e);
  c.f32_only = true;
  c.tol = 2e-6;
  c.forward = [=](Run& r) {
    for (size_t k = 0; k < updated.size(); ++k)
      r.be->copy(r.out[k], r.in[static_cast<size_t>(updated[k])],
                 static_cast<size_t>(r.f32_n(updated[k])) * sizeof(float));
    Buffer scale(r.be, sizeof(double));
    const double s = 0.7;
    r.be->from_host(scale.data(), &s, sizeof(double));
    step(r, scale.as<double>());
  };
  return c;
}

// The optimizers' kernels and Newton-Schulz (Muon's composition of GEMMs and scalings).
void add_optimizer_cases(std::vector<Case>& cs) {
  const int64_t n = 37;
  cs.push_back(optimizer_case(
      "adamw step", {{n}, {n}, {n}, {n, Spec::positive}}, {0, 2, 3}, {},
      [=](Run& r, const double* gs) {
        const Buffer f = on_device(r, adamw_factors(1e-2, 0.9, 0.95, 0.1, 3));
        r.be->adamw_step(f32_at(r, 0, true), f32_at(r, 1, false), f32_at(r, 1, true),
                         f32_at(r, 2, true), n, f.as<float>(), 0.9, 0.95, 1e-8, true, gs);
      }));
  cs.push_back(
      optimizer_case("lion step", {{n}, {n}, {n}}, {0, 2}, {}, [=](Run& r, const double* gs) {
        const Buffer f = on_device(r, decay_factors(1e-3, 0.5));
        r.be->lion_step(f32_at(r, 0, true), f32_at(r, 1, false), f32_at(r, 1, true), n,
                        f.as<float>(), 0.9, 0.99, true, gs);
      }));
  for (const bool nesterov : {false, true})
    cs.push_back(optimizer_case(std::string("sgd step") + (nesterov ? " nesterov" : ""),
                                {{n}, {n}, {n}}, {0, 2}, {}, [=](Run& r, const double* gs) {
                                  const Buffer lr = on_device(r, std::array<float, 1>{0.05f});
                                  r.be->sgd_step(f32_at(r, 0, true), f32_at(r, 1, false),
                                                 f32_at(r, 1, true), n, lr.as<float>(), 0.9,
                                                 nesterov, 0.01, gs);
                                }));
  cs.push_back(
      optimizer_case("muon momentum", {{n}, {n}}, {0}, {{n}}, [=](Run& r, const double* gs) {
        r.be->muon_momentum(f32_at(r, 1, true), f32_at(r, 0, true), f32_at(r, 1, false), n, 0.95,
                            true, gs);
      }));
  // p is 4 rows of 9 with a block of 4 x 5 updated (row stride 9), from a dense x.
  cs.push_back(
      optimizer_case("muon apply, strided", {{36}, {20}}, {0}, {}, [=](Run& r, const double* gs) {
        const Buffer f = on_device(r, decay_factors(0.02, 0.1));
        r.be->muon_apply(f32_at(r, 0, true) + 2, 9, f32_at(r, 1, false), 4, 5, f.as<float>(), true,
                         gs);
      }));
  cs.push_back(
      optimizer_case("copy 2d and scale by 1/norm", {{36}}, {}, {{20}}, [=](Run& r, const double*) {
        float* x = f32_at(r, 0, true);
        r.be->copy_2d(x, 5, f32_at(r, 0, false) + 3, 9, 4, 5);
        Buffer ss(r.be, sizeof(double));
        r.be->sum_squares(DType::f32, ss.as<double>(), x, 20);
        r.be->scale_by_rnorm(x, 20, ss.as<double>(), 1e-7);
      }));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 10}, {10, 6}})
    cs.push_back(optimizer_case(
        "newton-schulz " + std::to_string(rows) + "x" + std::to_string(cols), {{rows * cols}}, {0},
        {{rows * cols}}, [=](Run& r, const double*) {
          const int64_t k = std::min(rows, cols);
          Buffer a(r.be, static_cast<size_t>(2 * k * k) * sizeof(float)),
              norm(r.be, sizeof(double));
          Muon::newton_schulz(r.be, f32_at(r, 0, true), f32_at(r, 1, true), a.as<float>(),
                              a.as<float>() + k * k, norm.as<double>(), rows, cols, 5);
        }));
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  add_optimizer_cases(cs);
  cs.push_back(gemm_case(false, false, 7, 9, 5, 1.0, 0.0));
  cs.push_back(gemm_case(false, true, 6, 11, 13, 0.7, 1.0));
  cs.push_back(gemm_case(true, false, 10, 3, 8, 1.3, 0.5));
  cs.push_back(gemm_case(true, true, 5, 7, 9, -0.4, 0.0));
  cs.push_back(norm_case(false, 5, 37, 0.0));
  cs.push_back(norm_case(false, 4, 19, 1.0));
  cs.push_back(norm_case(true, 6, 23, 0.0));
  cs.push_back(attention_case("causal GQA", 2, 9, 4, 2, 8, 0, 0.0, false));
  cs.push_back(attention_case("window 3, softcap 2", 1, 11, 2, 1, 6, 3, 2.0, false));
  cs.push_back(attention_case("documents", 2, 10, 2, 2, 4, 0, 0.0, true));
  {
    Case c;  // out[N, O] = x + bias
    const int64_t N = 6, O = 13;
    c.name = "bias 6x13";
    c.in = {{N * O}, {O}};
    c.out = {{N * O}};
    c.forward = [=](Run& r) {
      r.be->copy(r.out[0], r.in[0], static_cast<size_t>(N * O) * dtype_size(r.dt));
      r.be->add_bias(r.dt, r.out[0], r.in[1], N, O);
    };
    c.backward = [=](Run& r) {
      r.be->accumulate(r.dt, r.din[0], r.dout[0], N * O);
      r.be->bias_backward(r.dt, r.din[1], r.dout[0], N, O);
    };
    cs.push_back(c);
  }
  {
    Case c;  // out = a + b, then *= -0.6
    const int64_t n = 37;
    c.name = "add, scale";
    c.in = {{n}, {n}};
    c.out = {{n}};
    c.forward = [=](Run& r) {
      r.be->add(r.dt, r.out[0], r.in[0], r.in[1], n);
      r.be->scale(r.dt, r.out[0], -0.6, n);
    };
    c.backward = [=](Run& r) {
      for (int i = 0; i < 2; ++i) {
        r.be->accumulate(r.dt, r.din[i], r.dout[0], n);
        r.be->scale(r.dt, r.din[i], -0.6, n);
      }
    };
    cs.push_back(c);
  }
  {
    Case c;  // a fixed mask: its own backward
    const int64_t n = 301;
    c.name = "dropout 0.25";
    c.in = {{n}};
    c.out = {{n}};
    const std::array<uint64_t, 2> key{9, 6};  // stream 6 ^ 2 = 4
    c.forward = [=](Run& r) {
      const Buffer k = on_device(r, key);
      r.be->dropout(r.dt, r.out[0], r.in[0], n, 0.25, k.as<uint64_t>(), 2);
    };
    c.backward = [=](Run& r) {
      const Buffer k = on_device(r, key);
      r.be->dropout(r.dt, r.din[0], r.dout[0], n, 0.25, k.as<uint64_t>(), 2);
    };
    cs.push_back(c);
  }
  {
    Case c;
    const int64_t N = 9, C = 7, V = 5;
    c.name = "embedding 9 ids of 5x7";
    c.in = {{V * C}, {N, Spec::ids, V}};
    c.out = {{N * C}};
    c.forward = [=](Run& r) {
      r.be->embedding_forward(r.dt, r.out[0], ids_of(r, 1), r.in[0], N, C, V);
    };
    c.backward = [=](Run& r) {
      r.be->embedding_backward(r.dt, r.din[0], r.dout[0], ids_of(r, 1), N, C, V);
    };
    cs.push_back(c);
  }
  {
    Case c;  // per-head RMSNorm over rows of stride 20 holding 3 heads of 6
    const int64_t N = 4, S = 20;
    const int H = 3, D = 6;
    c.name = "head rmsnorm";
    c.in = {{N * S}, {D, Spec::positive}};
    c.out = {{N * S}, {N * H, Spec::normal, 0, 0, true}};
    c.forward = [=](Run& r) {
      r.be->head_rmsnorm_forward(r.dt, r.out[0], r.out[1], r.in[0], r.in[1], N, S, H, D, 1e-6, 0);
    };
    c.backward = [=](Run& r) {
      r.be->head_rmsnorm_backward(r.dt, r.din[0], r.din[1], r.dout[0], r.in[0], r.in[1], r.out[1],
                                  N, S, H, D, 0);
    };
    cs.push_back(c);
  }
  {
    Case c;  // RoPE on rows of 2 heads of 8, 6 of each rotated; backward is the inverse rotation
    const int64_t N = 5, S = 16;
    c.name = "rope";
    c.in = {{N * S}, {N, Spec::ids, 40}, {3, Spec::freqs, 0, 0, true}};
    c.out = {{N * S}};
    auto freqs = [](Run& r) { return static_cast<const float*>(r.in[2]); };
    c.forward = [=](Run& r) {
      r.be->copy(r.out[0], r.in[0], static_cast<size_t>(N * S) * dtype_size(r.dt));
      r.be->rope(r.dt, r.out[0], ids_of(r, 1), freqs(r), N, S, 2, 8, 6, 1.1, false);
    };
    c.backward = [=](Run& r) {
      r.be->copy(r.din[0], r.dout[0], static_cast<size_t>(N * S) * dtype_size(r.dt));
      r.be->rope(r.dt, r.din[0], ids_of(r, 1), freqs(r), N, S, 2, 8, 6, 1.1, true);
    };
    cs.push_back(c);
  }
  for (Activation act :
       {Activation::silu, Activation::gelu_tanh, Activation::relu, Activation::relu2}) {
    const std::string a = act == Activation::silu        ? "silu"
                          : act == Activation::gelu_tanh ? "gelu"
                          : act == Activation::relu      ? "relu"
                                                         : "relu2";
    const int64_t N = 5, F = 11;
    Case g;
    g.name = "glu " + a;
    g.in = {{N * 2 * F}};
    g.out = {{N * F}};
    g.forward = [=](Run& r) { r.be->glu_forward(r.dt, act, r.out[0], r.in[0], N, F); };
    g.backward = [=](Run& r) { r.be->glu_backward(r.dt, act, r.din[0], r.dout[0], r.in[0], N, F); };
    cs.push_back(g);
    Case p;
    p.name = "act " + a;
    p.in = {{N * F}};
    p.out = {{N * F}};
    p.forward = [=](Run& r) { r.be->act_forward(r.dt, act, r.out[0], r.in[0], N * F); };
    p.backward = [=](Run& r) {
      r.be->act_backward(r.dt, act, r.din[0], r.dout[0], r.in[0], N * F);
    };
    cs.push_back(p);
  }
  {
    // train.activation_bits: 1. ReLU's backward from its packed sign mask (n = 55: a partial
    // last word), ReLU^2's from its output; each forward is act_forward.
    const int64_t n = 55;
    Case m;
    m.name = "relu from 1-bit mask";
    m.in = {{n}};
    m.out = {{n}};
    m.forward = [=](Run& r) { r.be->act_forward(r.dt, Activation::relu, r.out[0], r.in[0], n); };
    m.backward = [=](Run& r) {
      const Buffer mask(r.be, sign_mask_bytes(n));
      r.be->relu_mask(r.dt, mask.data(), r.in[0], n);
      r.be->relu_backward_masked(r.dt, r.din[0], r.dout[0], mask.data(), n);
    };
    cs.push_back(m);
    Case q;
    q.name = "relu2 from output";
    q.in = {{n}};
    q.out = {{n}};
    q.forward = [=](Run& r) { r.be->act_forward(r.dt, Activation::relu2, r.out[0], r.in[0], n); };
    q.backward = [=](Run& r) {
      const Buffer y(r.be, static_cast<size_t>(n) * dtype_size(r.dt));
      r.be->act_forward(r.dt, Activation::relu2, y.data(), r.in[0], n);
      r.be->relu2_backward_from_output(r.dt, r.din[0], r.dout[0], y.data(), n);
    };
    cs.push_back(q);
  }
  // The plain cross-entropy, and each loss of backend/loss.h (alone and all at once).
  struct Objective {
    const char* name;
    double cap;
    LossSpec loss;
  };
  const Objective objectives[] = {
      {"", 0.0, {}},
      {" softcap 3", 3.0, {}},
      {" label smoothing 0.1", 0.0, {0.1, 0, 0}},
      {" z-loss 0.05", 0.0, {0, 0.05, 0}},
      {" focal 2", 0.0, {0, 0, 2.0}},
      {" focal 0.5 smoothing 0.2 z-loss 0.01 softcap 3", 3.0, {0.2, 0.01, 0.5}}};
  for (const Objective& o : objectives) {
    const double cap = o.cap;
    const LossSpec spec = o.loss;
    Case c;  // losses of 7 rows over 13 classes, one label ignored; the gradient replaces logits
    const int64_t N = 7, V = 13;
    c.name = std::string("cross-entropy") + o.name;
    c.in = {{N * V}, {N, Spec::ids, V, 4}};
    c.out = {{N, Spec::normal, 0, 0, false, true}};
    c.uniform_dout = true;
    auto ce = [=](Run& r, void* logits, double scale) {
      r.be->cross_entropy(r.dt, logits, r.out.empty() ? nullptr : r.out[0], ids_of(r, 1), N, V,
                          -100, scale, cap, spec);
    };
    c.forward = [=](Run& r) {
      Buffer tmp(r.be, static_cast<size_t>(N * V) * dtype_size(r.dt));
      r.be->copy(tmp.data(), r.in[0], tmp.bytes());
      ce(r, tmp.data(), 0.0);
    };
    c.backward = [=](Run& r) {  // dout is one constant: read it back for the kernel's scale
      double s = 0;
      if (r.dt == DType::f64)
        r.be->to_host(&s, r.dout[0], 8);
      else {
        float f = 0;
        r.be->to_host(&f, r.dout[0], 4);
        s = f;
      }
      Buffer losses(r.be, static_cast<size_t>(N) * (r.dt == DType::f64 ? 8 : 4));  // statistics
      Run scratch = r;
      scratch.out = {losses.data()};
      r.be->copy(r.din[0], r.in[0], static_cast<size_t>(N * V) * dtype_size(r.dt));
      ce(scratch, r.din[0], s);
    };
    cs.push_back(c);
  }
  return cs;
}

class Parity : public ::testing::TestWithParam<Case> {};

TEST_P(Parity, BackendsMatchTheCpuInDoubleAndGradientsMatchFiniteDifferences) {
  const Case& c = GetParam();
  test::ScopedThreads threads(1);
  CpuBackend ref;
  std::vector<std::vector<double>> in;
  for (size_t i = 0; i < c.in.size(); ++i) in.push_back(draw(c.in[i], 100 + i));
  std::vector<std::vector<double>> dout;
  for (size_t i = 0; i < c.out.size(); ++i) {
    std::vector<double> d = test::randn(c.out[i].n, 200 + i);
    if (c.uniform_dout) std::fill(d.begin(), d.end(), 0.7);
    if (c.out[i].aux) std::fill(d.begin(), d.end(), 0.0);
    dout.push_back(d);
  }
  const Result want =
      run(c, ref, c.f32_only ? DType::f32 : DType::f64, in, c.backward ? &dout : nullptr);

  if (c.backward) {  // the reference's gradients against central differences of L
    for (size_t i = 0; i < c.in.size(); ++i) {
      if (want.din[i].empty()) continue;
      std::vector<std::vector<double>> x = in;  // input i is perturbed in this copy
      auto L = [&] {
        const Result r = run(c, ref, DType::f64, x, nullptr);
        double l = 0;
        for (size_t k = 0; k < c.out.size(); ++k) l += test::dot(r.out[k], dout[k]);
        return l;
      };
      test::expect_grad_matches_fd(x[i], want.din[i], L,
                                   c.name + ": d/d input " + std::to_string(i), {}, 60);
    }
  }
  for (auto& be : test::parity_backends()) {
    SCOPED_TRACE(be->name());
    const Result got = run(c, *be, DType::f32, in, c.backward ? &dout : nullptr);
    for (size_t k = 0; k < c.out.size(); ++k)
      expect_close(got.out[k], want.out[k], c.tol, c.name + ": output " + std::to_string(k));
    for (size_t i = 0; i < got.din.size(); ++i)
      if (!want.din[i].empty())
        expect_close(got.din[i], want.din[i], 10 * c.tol,
                     c.name + ": gradient " + std::to_string(i));
  }
}

// The CPU backend in bf16 (mixed precision's kernels: bf16 tensors, f32 statistics, computed in
// f32) against itself in f64 on the same bf16-rounded inputs. Each output rounds once to bf16
// (up to 2^-9 of itself); a few kernels round an intermediate too (the gemm case's gradient of C,
// accumulated then scaled). kBf16Tol relative to the case's largest element allows four such
// roundings; statistics in f32 meet the f32 tolerance's tenfold. Where the CPU lacks bf16 matrix
// instructions the products are emulated (LMTRAIN_CPU_BF16=emulate): the same contract.
class ParityBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(ParityBf16, CpuBf16MatchesDoubleToBf16Rounding) {
  const Case& c = GetParam();
  constexpr double kBf16Tol = 4.0 / 512;
  test::ScopedThreads threads(1);
  CpuBackend cpu;
  const test::ScopedBf16Products bf16;
  auto rounded = [](const Spec& s, std::vector<double> v) {
    if (elem(s, DType::bf16) == DType::bf16)
      for (double& x : v) x = bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
    return v;
  };
  std::vector<std::vector<double>> in, dout;
  for (size_t i = 0; i < c.in.size(); ++i) in.push_back(rounded(c.in[i], draw(c.in[i], 100 + i)));
  for (size_t i = 0; i < c.out.size(); ++i) {
    std::vector<double> d = test::randn(c.out[i].n, 200 + i);
    if (c.uniform_dout) std::fill(d.begin(), d.end(), 0.7);
    if (c.out[i].aux) std::fill(d.begin(), d.end(), 0.0);
    dout.push_back(rounded(c.out[i], d));
  }
  const Result want = run(c, cpu, DType::f64, in, c.backward ? &dout : nullptr);
  const Result got = run(c, cpu, DType::bf16, in, c.backward ? &dout : nullptr);
  for (size_t k = 0; k < c.out.size(); ++k)
    expect_close(got.out[k], want.out[k],
                 elem(c.out[k], DType::bf16) == DType::bf16 ? kBf16Tol : 10 * c.tol,
                 c.name + ": output " + std::to_string(k));
  for (size_t i = 0; i < got.din.size(); ++i)
    if (!want.din[i].empty())
      expect_close(got.din[i], want.din[i], kBf16Tol, c.name + ": gradient " + std::to_string(i));
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string n;
  for (char ch : i.param.name) n += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return n;
}

// The kernels of a bf16 step: all but the optimizers' (f32 only).
std::vector<Case> bf16_cases() {
  std::vector<Case> v;
  for (Case& c : cases())
    if (!c.f32_only) v.push_back(std::move(c));
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ops, Parity, ::testing::ValuesIn(cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, ParityBf16, ::testing::ValuesIn(bf16_cases()), case_name);

}  // namespace
}  // namespace lmt
