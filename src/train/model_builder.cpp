#include "train/model_builder.h"

#include <fmt/core.h>

#include "core/error.h"
#include "core/host_memory.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"

namespace lmt {

namespace {

void add_line(std::string& lines, const std::string& line) {
  lines += (lines.empty() ? "" : "\n") + line;
}

// The weights before any adapter; returns the line saying where they came from ("" for seed).
std::string start_weights(Transformer& model, const RunConfig& cfg, const BuildOptions& o) {
  const std::string& from = cfg.train.init_from;
  if (o.start == StartFrom::nothing) return "";
  if (o.start == StartFrom::seed || from.empty()) {
    model.init_weights(static_cast<uint64_t>(cfg.train.seed));
    return "";
  }
  if (o.resume.empty()) {
    // The model section is the directory's: load_run_config imported it, or the code that built
    // the config did (import_init_from).
    LMT_CHECK(cfg.imported_init_from == from,
              "a RunConfig built in code with train.init_from must call import_init_from(cfg)");
    load_hf_weights(from, model);
    return fmt::format(
        "init: weights of Hugging Face model '{}' ({}, from its config.json); tokenizer {}", from,
        cfg.model.family, cfg.data.tokenizer);
  }
  if (cfg.lora.rank > 0) {  // the frozen base is not in the checkpoint
    load_hf_weights(from, model);
    return fmt::format("init: base weights of Hugging Face model '{}'", from);
  }
  model.init_weights(static_cast<uint64_t>(cfg.train.seed));  // the checkpoint overwrites them
  return fmt::format("init: train.init_from '{}' not reloaded: resuming from {}", from, o.resume);
}

// LoRA: adapters on the frozen base (lora.init_from's when a run starts from them), the base in
// lora.base_dtype, and for a run the base's hash and the lines of its log.
void add_adapters(BuiltModel& b, const RunConfig& cfg, const BuildOptions& o) {
  Transformer& model = *b.model;
  const LoraSpec& lc = cfg.lora;
  const bool run = o.start == StartFrom::run;
  if (run) b.base_hash = base_weights_hash(model);
  if (run && !lc.init_from.empty() && o.resume.empty()) {  // continue from an existing adapter
    load_peft_adapter(lc.init_from, model);
    add_line(b.init_line, fmt::format("init: LoRA adapters of '{}'", lc.init_from));
  } else {
    model.add_lora(lc, static_cast<uint64_t>(cfg.train.seed));
  }
  if (lc.base_dtype == "bf16") model.set_base_dtype(DType::bf16);
  if (!run) return;
  add_line(
      b.init_line,
      fmt::format("LoRA: rank {}, alpha {}, {} adapters{}, {} trainable parameters; the base is "
                  "frozen{}",
                  lc.rank, lc.alpha, model.lora_targets().size(),
                  model.lora_saved().empty()
                      ? ""
                      : fmt::format(" and {} base tensors trained in full (modules_to_save)",
                                    model.lora_saved().size()),
                  model.lora_num_params(),
                  lc.base_dtype == "bf16" ? " and held in bf16 (computation in f32)" : ""));
}

// The checkpoint's weights and optimizer state; a LoRA checkpoint must hold adapters of this base.
void load_resume_point(BuiltModel& b, const RunConfig& cfg, const std::string& dir) {
  CheckpointState st;
  try {
    st = load_checkpoint(dir, *b.model, b.optimizer->state(), b.optimizer->name());
  } catch (const UserError& e) {
    throw UserError("--resume: checkpoint '" + dir + "' cannot be resumed: " + e.what() +
                    " (an older checkpoint can be named: --resume step_N)");
  }
  const std::string& from = cfg.train.init_from;
  if (cfg.lora.rank > 0 && st.base_hash != b.base_hash)
    throw UserError(fmt::format(
        "--resume: checkpoint '{}' holds adapters for another base model (base {} with weights "
        "{}; this run's base {} has weights {})",
        dir, st.base_init_from.empty() ? "initialised from train.seed" : st.base_init_from,
        st.base_hash, from.empty() ? "initialised from train.seed" : from, b.base_hash));
  b.optimizer->set_step_count(st.optimizer_step);
  b.resumed = std::move(st);
}

}  // namespace

int64_t loss_chunk_rows(const RunConfig& cfg, const DeviceInfo& device) {
  constexpr int64_t kCpuChunk = 1024, kShareOfMemory = 8;
  const TrainConfig& tc = cfg.train;
  if (tc.loss_chunk_tokens > 0) return tc.loss_chunk_tokens;
  if (!device.compiles) return kCpuChunk;
  uint64_t memory = device.memory_bytes > 0
                        ? static_cast<uint64_t>(static_cast<double>(device.memory_bytes) *
                                                device.allocator_fraction)
                        : physical_memory_bytes();
  if (memory == 0) return kCpuChunk;
  const int64_t rows = tc.micro_batch_size * cfg.data.seq_len;
  const int64_t tile = cfg.loss.head_vocab_tile();
  const int64_t width = tile > 0 && tile < cfg.model.vocab_size ? tile : cfg.model.vocab_size;
  const uint64_t row_bytes =
      static_cast<uint64_t>(width) * (tc.precision == "bf16" ? 2 : 4);
  const uint64_t budget = memory / kShareOfMemory;
  if (static_cast<uint64_t>(rows) * row_bytes <= budget) return rows;
  int64_t chunk = kCpuChunk;
  while (chunk * 2 < rows && static_cast<uint64_t>(chunk * 2) * row_bytes <= budget) chunk *= 2;
  return chunk;
}

BuiltModel build_model(const RunConfig& cfg, const BuildOptions& options) {
  const TrainConfig& tc = cfg.train;
  BuiltModel b;
  BackendOptions backend = backend_options(cfg);
  backend.compile_only = options.compile_only || options.target.has_value();
  backend.target = options.target;
  backend.store = options.store;
  b.backend = make_backend(tc.backend, backend);
  if (tc.precision == "bf16")
    if (const std::string why = b.backend->unsupported(DType::bf16); !why.empty())
      throw UserError("train.precision: " + why);
  b.model = std::make_unique<Transformer>(b.backend.get(), cfg.model);
  Transformer& model = *b.model;
  model.set_activation_checkpointing(tc.activation_checkpointing);
  model.set_activation_bits(static_cast<int>(tc.activation_bits));
  model.set_loss_chunk_tokens(loss_chunk_rows(cfg, b.backend->device()));
  model.set_loss(cfg.loss.spec(), cfg.loss.head_vocab_tile());
  b.init_line = start_weights(model, cfg, options);
  if (cfg.lora.rank > 0) add_adapters(b, cfg, options);
  if (tc.precision == "bf16") model.set_compute_dtype(DType::bf16);
  b.optimizer = make_optimizer(b.backend.get(), model.trainable_params(),
                               model.trainable_flat_size(), cfg.optimizer, tc.weight_decay);
  if (!options.resume.empty()) load_resume_point(b, cfg, options.resume);
  return b;
}

void init_base_weights(Transformer& model, const std::string& init_from, int64_t seed) {
  if (init_from.empty())
    model.init_weights(static_cast<uint64_t>(seed));
  else
    load_hf_weights(init_from, model);
}

}  // namespace lmt
