// lmtrain bench --head-loss: the output head and its loss alone (see bench.h), for the loss's
// entry in docs/performance.md: the full-logits loss, the chunked one and the cut cross-entropy
// side by side on one head.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "train/bench.h"
#include "train/model_builder.h"

namespace lmt {

namespace {

// n values in dtype dt at dst: one block of N(0, std) values, drawn once and uploaded again and
// again (the values repeat every block of 4M; what the bench measures does not depend on them, and
// drawing a 128K x 2048 matrix afresh would take longer than the bench).
void upload_normal(Backend* be, DType dt, void* dst, int64_t n, double std, uint64_t stream) {
  constexpr int64_t kBlock = int64_t{1} << 22;
  std::vector<float> f(static_cast<size_t>(std::min(kBlock, n)));
  fill_normal(f.data(), static_cast<int64_t>(f.size()), 0.0, std, 7, stream);
  std::vector<uint16_t> h;
  if (dt == DType::bf16) {
    h.resize(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
  }
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t m = std::min(kBlock, n - s);
    char* at = static_cast<char*>(dst) + static_cast<size_t>(s) * dtype_size(dt);
    if (dt == DType::bf16)
      be->from_host(at, h.data(), static_cast<size_t>(m) * 2);
    else
      be->from_host(at, f.data(), static_cast<size_t>(m) * 4);
  }
}

}  // namespace

nlohmann::json run_head_loss_bench(const RunConfig& cfg, const std::string& mode, int64_t steps,
                                   bool compile_only) {
  if (mode != "full" && mode != "chunked" && mode != "cut")
    throw UserError("bench --head-loss: '" + mode + "' is not full, chunked or cut");
  if (compile_only && cfg.train.backend != "pjrt")
    throw UserError("bench --compile-only: train.backend is '" + cfg.train.backend +
                    "'; only pjrt compiles its step");
  set_threads(cfg.train.threads);
  BackendOptions options = backend_options(cfg);
  options.compile_only = compile_only;
  const std::unique_ptr<Backend> be = make_backend(cfg.train.backend, options);
  const DType dt = cfg.train.precision == "bf16" ? DType::bf16 : DType::f32;
  if (const std::string why = be->unsupported(dt); !why.empty())
    throw UserError("train.precision: " + why);
  HeadLossArgs a;
  a.N = cfg.train.micro_batch_size * cfg.data.seq_len;
  a.C = cfg.model.hidden_size;
  a.V = cfg.model.vocab_size;
  RunConfig as_run = cfg;  // the chunk train would choose for this mode's loss
  as_run.loss.impl = mode == "cut" ? "cut" : "chunked";
  a.chunk = mode == "full" ? a.N : std::min(loss_chunk_rows(as_run, be->device()), a.N);
  a.vocab_tile = mode == "cut" ? cfg.loss.vocab_tile : 0;
  a.softcap = cfg.model.final_logit_softcapping;
  a.loss = cfg.loss.spec();
  a.grad_scale = 1.0 / static_cast<double>(a.N);
  const size_t es = dtype_size(dt), ss = dt == DType::f64 ? 8 : 4;
  const HeadLossScratch s = head_loss_scratch(a.chunk, a.V, a.vocab_tile);

  const Buffer h(be.get(), static_cast<size_t>(a.N * a.C) * es),
      w(be.get(), static_cast<size_t>(a.V * a.C) * es), labels(be.get(), sizeof(int32_t) * a.N),
      dh(be.get(), static_cast<size_t>(a.N * a.C) * es),
      dw(be.get(), static_cast<size_t>(a.V * a.C) * es), sums(be.get(), 2 * sizeof(double)),
      logits(be.get(), static_cast<size_t>(s.logits) * es),
      losses(be.get(), static_cast<size_t>(s.losses) * ss);
  for (const auto& [p, name] : {std::pair<const Buffer*, const char*>{&h, "head_loss.h"},
                                {&w, "lm_head.weight"},
                                {&labels, "batch.labels"},
                                {&dh, "head_loss.dh"},
                                {&dw, "grad.lm_head.weight"}})
    be->describe(p->data(), TensorDesc{name, p == &labels ? DType::i32 : dt,
                                       p == &labels          ? std::vector<int64_t>{a.N}
                                       : p == &w || p == &dw ? std::vector<int64_t>{a.V, a.C}
                                                             : std::vector<int64_t>{a.N, a.C}});
  if (!compile_only) {
    upload_normal(be.get(), dt, h.data(), a.N * a.C, 1.0, 1);
    upload_normal(be.get(), dt, w.data(), a.V * a.C, 0.02, 2);
    Rng rng(static_cast<uint64_t>(cfg.train.seed), 3);
    std::vector<int32_t> l(static_cast<size_t>(a.N));
    for (int32_t& x : l) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(a.V)));
    be->from_host(labels.data(), l.data(), l.size() * sizeof(int32_t));
    be->zero(dw.data(), dw.bytes());
  }
  auto* sum = static_cast<double*>(sums.data());
  double loss = 0, ce = 0;
  auto call = [&] {
    be->zero(sums.data(), sums.bytes());
    be->head_loss(dt, a, h.data(), w.data(), static_cast<const int32_t*>(labels.data()), sum,
                  dh.data(), dw.data(), logits.data(), losses.data(), sum + 1);
    double read[2] = {0, 0};
    be->to_host(read, sums.data(), sizeof(read));  // waits for the call
    loss = read[0] / static_cast<double>(a.N);
    ce = read[1] / static_cast<double>(a.N);
  };
  Timer first;
  call();  // warm-up (and the compile, on pjrt)
  const double first_s = first.seconds();
  // A compiling backend (pjrt): the first call's program also holds the uploads and dw's zeroing;
  // the calls after it are another program, compiled here rather than in the first timed call.
  if (be->device().compiles && !compile_only) call();
  std::vector<double> times;
  for (int64_t i = 0; i < (compile_only ? 0 : steps); ++i) {
    Timer t;
    call();
    times.push_back(t.seconds());
  }
  nlohmann::json j;
  j["backend"] = be->name();
  if (const std::string k = be->kernels(); !k.empty()) j["kernels"] = k;
  j["mode"] = mode;
  j["tokens"] = a.N;
  j["hidden_size"] = a.C;
  j["vocab_size"] = a.V;
  j["precision"] = cfg.train.precision;
  j["chunk_tokens"] = a.chunk;
  if (mode == "cut") j["vocab_tile"] = a.vocab_tile;
  j["logits_scratch_bytes"] = static_cast<int64_t>(s.logits) * static_cast<int64_t>(es);
  j["gradient_bytes"] = static_cast<int64_t>(dh.bytes() + dw.bytes());
  j["first_call_ms"] = first_s * 1e3;
  if (const DeviceInfo d = be->device(); d.compiles) {
    j["platform"] = d.platform;
    j["device_kind"] = d.kind;
    if (d.programs.last_memory) j["program_memory"] = program_memory(*d.programs.last_memory);
    if (d.peak_bytes) j["device_peak_bytes"] = *d.peak_bytes;
  } else {  // what the call holds beside its inputs and gradients, by construction
    j["loss_scratch_bytes"] =
        static_cast<int64_t>(s.logits) * static_cast<int64_t>(es) +
        static_cast<int64_t>(s.losses) * static_cast<int64_t>(ss) +
        (mode == "cut" ? std::min(a.chunk, a.N) * int64_t{80} : 0);  // the cut loss's row stats
  }
  j["peak_rss_bytes"] = peak_rss_bytes();
  if (compile_only) return j;
  std::sort(times.begin(), times.end());
  double total = 0;
  for (double t : times) total += t;
  const double mean = total / static_cast<double>(times.size());
  // The products: logits, then d/dh and d/dw; the cut loss forms the logits twice.
  const double products = mode == "cut" ? 4 : 3;
  const double flops = products * 2.0 * static_cast<double>(a.N * a.C) * static_cast<double>(a.V);
  j["calls"] = steps;
  j["call_ms"] = mean * 1e3;
  j["call_ms_median"] = times[times.size() / 2] * 1e3;
  j["tokens_per_s"] = static_cast<double>(a.N) / mean;
  j["achieved_tflops"] = flops / mean / 1e12;
  j["loss"] = loss;
  j["ce"] = ce;
  return j;
}

}  // namespace lmt
