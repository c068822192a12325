#include "train/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/pjrt/pjrt_backend.h"
#include "core/dtype.h"
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
}  // namespace

nlohmann::json run_bench(RunConfig cfg, int64_t steps) {
  set_threads(cfg.train.threads);
  check_training_memory(cfg, physical_memory_bytes());
  auto be = make_backend(cfg.train.backend, {cfg.train.pjrt_plugin, cfg.train.deterministic});
  const ModelConfig& mc = cfg.model;
  const int64_t B = cfg.train.micro_batch_size, T = cfg.data.seq_len;
  const int64_t accum = cfg.train.grad_accum_steps;
  const DType compute = cfg.train.precision == "bf16" ? DType::bf16 : DType::f32;
  const double peak = measure_gemm_peak(be.get(), compute, kPeakGemmSize, 9);

  Transformer model(be.get(), mc);
  model.set_activation_checkpointing(cfg.train.activation_checkpointing);
  model.set_activation_bits(static_cast<int>(cfg.train.activation_bits));
  model.set_loss_chunk_tokens(cfg.train.loss_chunk_tokens);
  model.init_weights(static_cast<uint64_t>(cfg.train.seed));
  const bool lora = cfg.lora.rank > 0;  // a frozen base and adapters, as train() runs LoRA
  if (lora) {
    model.add_lora(lora_spec(cfg.lora), static_cast<uint64_t>(cfg.train.seed));
    if (cfg.lora.base_dtype == "bf16") model.set_base_dtype(DType::bf16);
  }
  if (cfg.train.precision == "bf16") model.set_compute_dtype(DType::bf16);
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(
      be.get(), model.trainable_params(), model.trainable_flat_size(), optimizer_spec(cfg));
  Optimizer& opt = *optimizer;

  Rng rng(static_cast<uint64_t>(cfg.train.seed), 99);
  std::vector<int32_t> ids(static_cast<size_t>(B * T * accum));
  for (auto& x : ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(mc.vocab_size)));
  std::vector<int32_t> labels(ids.begin() + 1, ids.end());
  labels.push_back(ids.front());
  const double scale = 1.0 / static_cast<double>(B * T * accum);

  auto step = [&]() {
    model.zero_grads();
    for (int64_t a = 0; a < accum; ++a)
      model.forward_backward(ids.data() + a * B * T, labels.data() + a * B * T, B, T, scale,
                             nullptr, false);  // as the trainer's step: one read at its end
    opt.clip_and_step(static_cast<float*>(model.trainable_data()),
                      static_cast<float*>(model.trainable_grads_data()), cfg.train.lr,
                      cfg.train.grad_clip);
    model.discard_grads();
    model.take_loss_sum();
    be->synchronize();
  };
  Timer first;
  step();  // warm-up: plans the arena, touches every page (and compiles, on pjrt)
  const double first_step_s = first.seconds();
  be->reset_gemm_seconds();
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    Timer t;
    step();
    times.push_back(t.seconds());
  }
  double total = 0;
  for (double t : times) total += t;
  const double mean = total / static_cast<double>(times.size());
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];

  const double tokens = static_cast<double>(B * T * accum);
  const int64_t adapter_params = model.lora_num_params();
  const double fpt = train_flops_per_token(model, T);
  const double tps = tokens / mean;
  nlohmann::json j;
  j["backend"] = be->name();
  j["shape"] = {{"vocab_size", mc.vocab_size},
                {"hidden_size", mc.hidden_size},
                {"intermediate_size", mc.intermediate_size},
                {"num_hidden_layers", mc.num_hidden_layers},
                {"num_attention_heads", mc.num_attention_heads},
                {"num_key_value_heads", mc.kv_heads()},
                {"seq_len", T},
                {"micro_batch_size", B},
                {"grad_accum_steps", accum},
                {"activation_checkpointing", cfg.train.activation_checkpointing},
                {"activation_bits", cfg.train.activation_bits}};
  j["params"] = model.num_params();
  j["optimizer"] = opt.name();
  if (lora)
    j["lora"] = {{"rank", cfg.lora.rank},
                 {"target_modules", cfg.lora.target_modules},
                 {"base_dtype", cfg.lora.base_dtype},
                 {"trainable_params", adapter_params}};
  j["steps"] = steps;
  j["tokens_per_s"] = tps;
  j["step_ms"] = mean * 1e3;
  j["step_ms_median"] = median * 1e3;
  j["flops_per_token"] = fpt;
  j["achieved_flops"] = fpt * tps;
  j["peak_flops"] = peak;
  j["precision"] = cfg.train.precision;
  j["peak_flops_source"] =
      fmt::format("measured: best {} GEMM {}x{}x{} on this backend", cfg.train.precision,
                  kPeakGemmSize, kPeakGemmSize, kPeakGemmSize);
  j["mfu"] = fpt * tps / peak;
  j["gemm_share"] = be->gemm_seconds() / total;
  j["activation_bytes"] = model.activation_bytes(B, T);
  j["peak_rss_bytes"] = peak_rss_bytes();
  j["first_step_ms"] = first_step_s * 1e3;
  if (const PjrtBackendStats st = pjrt_backend_stats(*be); st.programs_run > 0) {
    j["pjrt"] = {{"programs_compiled", st.programs_compiled},
                 {"compile_seconds", st.compile_seconds},
                 {"program_chars", st.last_program_chars}};
  }
  return j;
}

}  // namespace lmt
