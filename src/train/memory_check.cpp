// Training memory against the machine's: the same terms `lmtrain info` prints, plus the token
// buffers of a whole step (they grow with train.grad_accum_steps). The limit is physical memory,
// not MemAvailable: a run between the two may still fit once other processes leave, and pages
// are only touched as they are used, so only a run that can never fit is refused.
#include "train/memory_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "model/activation_plan.h"
#include "model/model_weights.h"
#include "optim/optimizer.h"
#include "train/model_builder.h"

namespace lmt {

namespace {

constexpr uint64_t kTooBig = std::numeric_limits<uint64_t>::max();

uint64_t mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kTooBig : r;
}

uint64_t add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kTooBig : r;
}

std::string gib(uint64_t b) {
  return gib_text(b);
}

}  // namespace

uint64_t TrainingMemory::total() const {
  return add(add(add(weights, gradients), add(optimizer, activations)),
             add(lora_scratch, step_tokens));
}

TrainingMemory training_memory(const RunConfig& cfg) {
  TrainingMemory m;
  int64_t flat = 0;
  std::vector<ParamInfo> params = param_layout(cfg.model, &flat);
  int64_t trained_flat = flat;
  m.weights = mul(static_cast<uint64_t>(flat), sizeof(float));
  uint64_t trained = m.weights;  // what has gradients and optimizer state
  if (cfg.lora.rank > 0) {       // a frozen base and its adapters
    LoraLayout lora = lora_layout(cfg.model, cfg.lora);
    trained_flat = lora.flat_size;
    params = std::move(lora.params);
    trained = mul(static_cast<uint64_t>(trained_flat), sizeof(float));
    if (cfg.lora.base_dtype == "bf16") m.weights = ModelWeights::base_bytes(cfg.model, DType::bf16);
    m.weights = add(m.weights, trained);
  }
  m.gradients = trained;
  m.optimizer = optimizer_bytes(cfg.optimizer, params, trained_flat);
  const TrainConfig& t = cfg.train;
  const bool bf16 = t.precision == "bf16";
  if (bf16) {  // the bf16 compute copies of every weight and of the trained gradients
    m.weights = add(m.weights, mul(static_cast<uint64_t>(flat), 2));
    if (cfg.lora.rank > 0) m.weights = add(m.weights, trained / 2);
    m.gradients = add(m.gradients, trained / 2);
  }
  const ActivationSettings settings{t.activation_checkpointing,
                                    static_cast<int>(t.activation_bits),
                                    loss_chunk_rows(cfg, DeviceInfo{}),  // the CPU backend's
                                    cfg.loss.head_vocab_tile()};
  m.activations = ActivationPlan::bytes(cfg.model, bf16 ? DType::bf16 : DType::f32,
                                        t.micro_batch_size, cfg.data.seq_len, settings);
  if (cfg.lora.rank > 0) {  // the adapters' scratch at its largest input width
    const ModelConfig& mc = cfg.model;
    const int64_t N = t.micro_batch_size * cfg.data.seq_len;
    const int64_t widest =
        std::max({mc.hidden_size, mc.intermediate_size, mc.num_attention_heads * mc.head_size()});
    const int64_t elems =
        lora_scratch_elems(N, cfg.lora.rank, widest, cfg.lora.dropout > 0);
    m.lora_scratch = mul(static_cast<uint64_t>(elems), bf16 ? 2 : 4);
  }
  const uint64_t tokens =
      mul(mul(static_cast<uint64_t>(t.micro_batch_size), static_cast<uint64_t>(cfg.data.seq_len)),
          static_cast<uint64_t>(t.grad_accum_steps));
  m.step_tokens = mul(tokens, 4 * sizeof(int32_t));
  return m;
}

void check_training_memory(const RunConfig& cfg, uint64_t available) {
  if (available == 0) return;
  const TrainingMemory m = training_memory(cfg);
  const uint64_t need = m.total();
  if (need <= available) return;
  const uint64_t model = add(add(m.weights, m.gradients), m.optimizer);
  const char* keys =
      model >= m.activations && model >= m.step_tokens
          ? "model.hidden_size, model.intermediate_size, model.num_hidden_layers, model.vocab_size"
      : m.activations >= m.step_tokens
          ? "train.micro_batch_size, data.seq_len (or train.activation_checkpointing)"
          : "train.grad_accum_steps, train.micro_batch_size, data.seq_len";
  throw UserError(fmt::format(
      "train: a training step needs {} of memory but this machine has {} (weights, gradients "
      "and optimizer state {}, activations of one micro-batch {}, token buffers of one step {}): "
      "lower {}",
      gib(need), gib(available), gib(model), gib(m.activations), gib(m.step_tokens), keys));
}

}  // namespace lmt
