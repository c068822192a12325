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
#include "train/memory_check.h"
#include "train/trainer.h"

namespace lmt {

double train_flops_per_token(const ModelConfig& m, int64_t seq_len, int64_t matmul_params) {
  const double attn = 12.0 * static_cast<double>(m.num_hidden_layers) *
                      static_cast<double>(m.num_attention_heads * m.head_size()) *
                      static_cast<double>(seq_len);
  return 6.0 * static_cast<double>(matmul_params) + attn;
}

namespace {

// FLOP/s of one large GEMM in dt (f32, or bf16 for mixed precision) on this backend: the
// ceiling MFU is measured against.
double measure_gemm_peak(Backend* be, DType dt) {
  const int64_t n = 2048;
  const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dt);
  Buffer a(be, bytes), b(be, bytes), c(be, bytes);
  std::vector<float> host(static_cast<size_t>(n * n));
  fill_normal(host.data(), n * n, 0.0, 1.0, 1, 1);
  std::vector<uint8_t> raw(bytes);
  for (int64_t i = 0; i < n * n; ++i)
    store_element(dt, raw.data(), i, host[static_cast<size_t>(i)]);
  be->from_host(a.data(), raw.data(), bytes);
  be->from_host(b.data(), raw.data(), bytes);
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {  // best of 9: the machine may be shared
    Timer t;
    be->gemm(dt, false, true, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
    be->synchronize();
    if (rep > 0) best = std::min(best, t.seconds());  // first one warms up
  }
  return 2.0 * n * n * n / best;
}

}  // namespace

nlohmann::json run_bench(RunConfig cfg, int64_t steps) {
  set_threads(cfg.train.threads);
  check_training_memory(cfg, physical_memory_bytes());
  auto be = make_backend(cfg.train.backend, cfg.train.pjrt_plugin);
  const ModelConfig& mc = cfg.model;
  const int64_t B = cfg.train.micro_batch_size, T = cfg.data.seq_len;
  const int64_t accum = cfg.train.grad_accum_steps;
  const DType compute = cfg.train.precision == "bf16" ? DType::bf16 : DType::f32;
  const double peak = measure_gemm_peak(be.get(), compute);

  Transformer model(be.get(), mc);
  model.set_activation_checkpointing(cfg.train.activation_checkpointing);
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

  // Parameters in matrix products: all but an untied input embedding and gpt2's position table
  // (lookups, not products).
  int64_t matmul_params = model.num_params();
  if (!mc.tie_word_embeddings) matmul_params -= mc.vocab_size * mc.hidden_size;
  if (mc.traits().learned_positions) matmul_params -= mc.max_position_embeddings * mc.hidden_size;
  const double tokens = static_cast<double>(B * T * accum);
  const int64_t adapter_params = model.lora_num_params();
  // LoRA: the frozen base's products run forward and for the input gradient only (4 FLOPs per
  // parameter and token instead of 6); the adapters train fully (6), and a saved head
  // (modules_to_save) adds its weight gradient (2; saved norms and tables are no products).
  double lora_flops = 0;
  for (const LoraTarget& t : model.lora_targets())
    lora_flops += 6.0 * static_cast<double>(model.lora_params()[static_cast<size_t>(t.a)].numel() +
                                            model.lora_params()[static_cast<size_t>(t.b)].numel());
  for (const SavedParam& sp : model.lora_saved())
    if (sp.base_name == "lm_head.weight")
      lora_flops += 2.0 * static_cast<double>(mc.vocab_size * mc.hidden_size);
  const double fpt = lora ? train_flops_per_token(mc, T, matmul_params) -
                                2.0 * static_cast<double>(matmul_params) + lora_flops
                          : train_flops_per_token(mc, T, matmul_params);
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
                {"activation_checkpointing", cfg.train.activation_checkpointing}};
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
      fmt::format("measured: best {} GEMM 2048x2048x2048 on this backend", cfg.train.precision);
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
