#include "train/flops.h"

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "core/timer.h"

namespace lmt {

double train_flops_per_token(const ModelConfig& m, int64_t seq_len, int64_t matmul_params) {
  const double attn = 12.0 * static_cast<double>(m.num_hidden_layers) *
                      static_cast<double>(m.num_attention_heads * m.head_size()) *
                      static_cast<double>(seq_len);
  return 6.0 * static_cast<double>(matmul_params) + attn;
}

double train_flops_per_token(const Transformer& model, int64_t seq_len) {
  const ModelConfig& mc = model.config();
  // Parameters in matrix products: all but an untied input embedding and gpt2's position table
  // (lookups, not products).
  int64_t matmul_params = model.num_params();
  if (!mc.tie_word_embeddings) matmul_params -= mc.vocab_size * mc.hidden_size;
  if (mc.traits().learned_positions) matmul_params -= mc.max_position_embeddings * mc.hidden_size;
  const double full = train_flops_per_token(mc, seq_len, matmul_params);
  if (model.lora_targets().empty() && model.lora_saved().empty()) return full;
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
  return full - 2.0 * static_cast<double>(matmul_params) + lora_flops;
}

double measure_gemm_peak(Backend* be, DType dt, int64_t n, int reps) {
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
  for (int rep = 0; rep <= reps; ++rep) {  // best of reps: the machine may be shared
    Timer t;
    be->gemm(dt, false, true, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
    be->synchronize();
    if (rep > 0) best = std::min(best, t.seconds());  // the first one warms up
  }
  return 2.0 * static_cast<double>(n * n * n) / best;
}

}  // namespace lmt
