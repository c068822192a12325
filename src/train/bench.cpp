// lmtrain bench: the training step of a config on random tokens, timed (or, with --compile-only,
// only compiled), reported as one JSON object.
#include "train/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/pjrt/pjrt_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/flops.h"
#include "train/memory_check.h"
#include "train/trainer.h"

namespace lmt {

namespace {

constexpr int64_t kPeakGemmSize = 2048;

nlohmann::json program_memory(const PjrtProgramMemory& m) {
  return {{"argument_bytes", m.argument},
          {"output_bytes", m.output},
          {"alias_bytes", m.alias},
          {"temp_bytes", m.temp},
          {"argument_plus_temp_bytes", m.argument + m.temp}};
}

// What the PJRT backend counted: compiles, the step program's planned memory, the device's peak.
nlohmann::json pjrt_report(const Backend& be) {
  const PjrtBackendStats st = pjrt_backend_stats(be);
  nlohmann::json j = {{"platform", st.platform},
                      {"device_kind", st.device_kind},
                      {"attention", st.attention},
                      {"programs_compiled", st.programs_compiled},
                      {"compile_seconds", st.compile_seconds},
                      {"program_chars", st.last_program_chars}};
  j["step_memory"] = st.last_memory ? program_memory(*st.last_memory) : nlohmann::json("n/a");
  j["device_peak_bytes"] =
      st.device_peak_bytes ? nlohmann::json(*st.device_peak_bytes) : nlohmann::json("n/a");
  return j;
}

nlohmann::json shape_of(const RunConfig& cfg) {
  const ModelConfig& mc = cfg.model;
  return {{"vocab_size", mc.vocab_size},
          {"hidden_size", mc.hidden_size},
          {"intermediate_size", mc.intermediate_size},
          {"num_hidden_layers", mc.num_hidden_layers},
          {"num_attention_heads", mc.num_attention_heads},
          {"num_key_value_heads", mc.kv_heads()},
          {"seq_len", cfg.data.seq_len},
          {"micro_batch_size", cfg.train.micro_batch_size},
          {"grad_accum_steps", cfg.train.grad_accum_steps},
          {"activation_checkpointing", cfg.train.activation_checkpointing},
          {"activation_bits", cfg.train.activation_bits}};
}

// The model as train() sets it up: weights (unless only compiling), LoRA, precision.
void set_up(Transformer& model, const RunConfig& cfg, bool init) {
  model.set_activation_checkpointing(cfg.train.activation_checkpointing);
  model.set_activation_bits(static_cast<int>(cfg.train.activation_bits));
  model.set_loss_chunk_tokens(cfg.train.loss_chunk_tokens);
  const auto seed = static_cast<uint64_t>(cfg.train.seed);
  if (init) model.init_weights(seed);
  if (cfg.lora.rank > 0) {  // a frozen base and adapters, as train() runs LoRA
    model.add_lora(lora_spec(cfg.lora), seed);
    if (cfg.lora.base_dtype == "bf16") model.set_base_dtype(DType::bf16);
  }
  if (cfg.train.precision == "bf16") model.set_compute_dtype(DType::bf16);
}

struct Timing {
  double first_s = 0, mean_s = 0, median_s = 0, total_s = 0;
};

// One warm-up step, then `steps` timed ones, each as the trainer runs it (one read at its end).
Timing time_steps(Backend& be, Transformer& model, Optimizer& opt, const RunConfig& cfg,
                  int64_t steps) {
  const int64_t B = cfg.train.micro_batch_size, T = cfg.data.seq_len;
  const int64_t accum = cfg.train.grad_accum_steps, N = B * T;
  Rng rng(static_cast<uint64_t>(cfg.train.seed), 99);
  std::vector<int32_t> ids(static_cast<size_t>(N * accum));
  for (auto& x : ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.model.vocab_size)));
  std::vector<int32_t> labels(ids.begin() + 1, ids.end());
  labels.push_back(ids.front());
  const double scale = 1.0 / static_cast<double>(N * accum);
  auto step = [&]() {
    model.zero_grads();
    for (int64_t a = 0; a < accum; ++a)
      model.forward_backward(ids.data() + a * N, labels.data() + a * N, B, T, scale, nullptr,
                             false);
    opt.step(static_cast<float*>(model.trainable_data()),
             static_cast<float*>(model.trainable_grads_data()), cfg.train.lr, cfg.train.grad_clip);
    model.discard_grads();
    opt.finish_step();
    model.take_loss_sum();
    be.synchronize();
  };
  Timing t;
  Timer first;
  step();  // warm-up: plans the arena, touches every page (and compiles, on pjrt)
  t.first_s = first.seconds();
  be.reset_gemm_seconds();
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    Timer one;
    step();
    times.push_back(one.seconds());
  }
  for (double x : times) t.total_s += x;
  t.mean_s = times.empty() ? 0 : t.total_s / static_cast<double>(times.size());
  std::sort(times.begin(), times.end());
  t.median_s = times.empty() ? 0 : times[times.size() / 2];
  return t;
}

}  // namespace

nlohmann::json run_bench(RunConfig cfg, int64_t steps, bool compile_only) {
  set_threads(cfg.train.threads);
  if (compile_only && cfg.train.backend != "pjrt")
    throw UserError("bench --compile-only: train.backend is '" + cfg.train.backend +
                    "'; only pjrt compiles its step");
  if (!compile_only) check_training_memory(cfg, physical_memory_bytes());
  BackendOptions options = backend_options(cfg);
  options.compile_only = compile_only;
  auto be = make_backend(cfg.train.backend, options);
  const DType compute = cfg.train.precision == "bf16" ? DType::bf16 : DType::f32;
  const PeakFlops peak = compile_only ? PeakFlops{} : mfu_peak(be.get(), compute, kPeakGemmSize, 9);

  Transformer model(be.get(), cfg.model);
  set_up(model, cfg, !compile_only);
  const std::unique_ptr<Optimizer> opt = make_optimizer(
      be.get(), model.trainable_params(), model.trainable_flat_size(), optimizer_spec(cfg));
  const Timing t = time_steps(*be, model, *opt, cfg, compile_only ? 0 : steps);

  nlohmann::json j;
  j["backend"] = be->name();
  j["shape"] = shape_of(cfg);
  j["params"] = model.num_params();
  j["optimizer"] = opt->name();
  j["precision"] = cfg.train.precision;
  if (cfg.lora.rank > 0)
    j["lora"] = {{"rank", cfg.lora.rank},
                 {"target_modules", cfg.lora.target_modules},
                 {"base_dtype", cfg.lora.base_dtype},
                 {"trainable_params", model.lora_num_params()}};
  j["activation_bytes"] = model.activation_bytes(cfg.train.micro_batch_size, cfg.data.seq_len);
  j["peak_rss_bytes"] = peak_rss_bytes();
  if (be->name() == "pjrt") j["pjrt"] = pjrt_report(*be);
  if (compile_only) return j;
  const double tokens = static_cast<double>(cfg.train.micro_batch_size * cfg.data.seq_len *
                                            cfg.train.grad_accum_steps);
  const double fpt = train_flops_per_token(model, cfg.data.seq_len), tps = tokens / t.mean_s;
  j["steps"] = steps;
  j["tokens_per_s"] = tps;
  j["step_ms"] = t.mean_s * 1e3;
  j["step_ms_median"] = t.median_s * 1e3;
  j["first_step_ms"] = t.first_s * 1e3;
  j["flops_per_token"] = fpt;
  j["achieved_flops"] = fpt * tps;
  j["peak_flops"] = peak.flops;
  j["peak_flops_source"] = peak.source;
  j["mfu"] = fpt * tps / peak.flops;
  j["gemm_share"] = be->gemm_seconds() / t.total_s;
  return j;
}

}  // namespace lmt
