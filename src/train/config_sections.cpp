// The checks of the run config's own sections (config_sections.h), each within its section; the
// checks between sections are RunConfig::validate's (run_config.cpp). A message starts with the
// key it is about, as the YAML names it.
#include "train/config_sections.h"

#include <fmt/format.h>

#include <utility>

#include "core/config_checks.h"
#include "core/error.h"

namespace lmt {

void SourceConfig::validate(const std::string& at) const {
  if (path.empty()) throw UserError(at + "path must not be empty");
  require_choices(*this, at);
  if (format != "text" && field.empty()) throw UserError(at + "field must not be empty");
  if (split == "delimiter" && delimiter.empty())
    throw UserError(at + "delimiter must not be empty when split is 'delimiter'");
  require_finite(*this, at);
  require(weight > 0, at + "weight", "> 0", weight);
}

void DataConfig::validate() const {
  require(seq_len >= 1, "data.seq_len", ">= 1", seq_len);
  if (tokenizer.empty()) throw UserError("data.tokenizer must not be empty");
  require(val_fraction >= 0 && val_fraction <= 0.5, "data.val_fraction", "in [0, 0.5]",
          val_fraction);
  require_choices(*this, "data.");
  if (sources.empty() && store.empty())
    throw UserError(
        "data.sources must list at least one source (or data.store name a prepared "
        "token store)");
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string at = "data.sources[" + std::to_string(i) + "].";
    const std::string& name = sources[i].name;
    for (size_t j = 0; j < i && !name.empty(); ++j)
      if (sources[j].name == name)
        throw UserError(at + "name '" + name + "' is also data.sources[" + std::to_string(j) +
                        "]'s (names must differ)");
    sources[i].validate(at);
  }
}

void EvalConfig::validate() const {
  require(limit >= 0, "eval.limit", ">= 0 (0 = every document)", limit);
  require(num_fewshot >= -1, "eval.num_fewshot", ">= 0, or -1 for each task's own", num_fewshot);
  require(batch >= 1 && batch <= 65536, "eval.batch", "in [1, 65536]", batch);
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].empty())
      throw UserError("eval.tasks[" + std::to_string(i) + "] is empty (a task file's path)");
}

void TrainConfig::validate() const {
  require_finite(*this, "train.");
  require_choices(*this, "train.");
  if (!pjrt_plugin.empty() && backend != "pjrt")
    throw UserError("train.pjrt_plugin is set, but train.backend is '" + backend +
                    "' (the plugin is used with backend pjrt)");
  if (deterministic && backend != "pjrt")
    throw UserError("train.deterministic is set, but train.backend is '" + backend +
                    "' (it asks XLA for deterministic ops; the CPU backend always is)");
  require(activation_bits == 0 || activation_bits == 1, "train.activation_bits",
          "0 or 1 (0 = the pre-activation kept whole)", activation_bits);
  require(micro_batch_size >= 1, "train.micro_batch_size", ">= 1", micro_batch_size);
  require(grad_accum_steps >= 1, "train.grad_accum_steps", ">= 1", grad_accum_steps);
  require(max_steps > 0, "train.max_steps", "> 0", max_steps);
  require(lr > 0, "train.lr", "> 0", lr);
  require(min_lr >= 0, "train.min_lr", ">= 0", min_lr);
  if (min_lr > lr)
    throw UserError(fmt::format("train.min_lr ({}) must be <= train.lr ({})", min_lr, lr));
  require(warmup_steps >= 0, "train.warmup_steps", ">= 0", warmup_steps);
  require(decay_fraction >= 0 && decay_fraction <= 1, "train.decay_fraction", "in [0, 1]",
          decay_fraction);
  require(weight_decay >= 0, "train.weight_decay", ">= 0", weight_decay);
  require(grad_clip >= 0, "train.grad_clip", ">= 0 (0 = off)", grad_clip);
  require(peak_tflops >= 0, "train.peak_tflops", ">= 0 (0 = known or measured)", peak_tflops);
  require(eval_every >= 0, "train.eval_every", ">= 0 (0 = never)", eval_every);
  require(eval_steps >= 1 || eval_every == 0, "train.eval_steps", ">= 1 when eval_every > 0",
          eval_steps);
  require(save_every >= 0, "train.save_every", ">= 0 (0 = only at the end)", save_every);
  require(keep_last >= 0, "train.keep_last", ">= 0 (0 = all)", keep_last);
  require(log_every >= 1, "train.log_every", ">= 1", log_every);
  if (out_dir.empty()) throw UserError("train.out_dir must not be empty");
  require(loss_chunk_tokens >= 0, "train.loss_chunk_tokens", ">= 0 (0 = chosen from memory)",
          loss_chunk_tokens);
  require(threads >= 0, "train.threads", ">= 0 (0 = all cores)", threads);
  require(sample_tokens >= 0, "train.sample_tokens", ">= 0", sample_tokens);
}

void LossConfig::validate() const {
  require_finite(*this, "loss.");
  require_choices(*this, "loss.");
  require(label_smoothing >= 0 && label_smoothing < 1, "loss.label_smoothing", "in [0, 1)",
          label_smoothing);
  require(z_loss >= 0, "loss.z_loss", ">= 0 (0 = off)", z_loss);
  require(focal_gamma > 0 && focal_gamma <= 100, "loss.focal_gamma", "in (0, 100]", focal_gamma);
  if (name != "focal" && focal_gamma != LossConfig().focal_gamma)
    throw UserError(fmt::format(
        "loss.focal_gamma is {}, but loss.name is '{}' (the focal factor applies with loss.name: "
        "focal)",
        focal_gamma, name));
  require(vocab_tile >= 1, "loss.vocab_tile", ">= 1", vocab_tile);
}

void ParallelConfig::validate() const {
  require(data >= 1, "parallel.data", ">= 1", data);
  require(fsdp >= 1, "parallel.fsdp", ">= 1", fsdp);
  require(tensor >= 1, "parallel.tensor", ">= 1", tensor);
  // The product in 128 bits: three axes of 2^32 must not wrap to a size of 0.
  const __int128 devices_wanted = static_cast<__int128>(data) * fsdp * tensor;
  if (devices_wanted > kMaxMeshDevices)
    throw UserError(fmt::format(
        "parallel: the mesh data {} x fsdp {} x tensor {} is more than {} devices (the largest "
        "mesh lmtrain makes)",
        data, fsdp, tensor, kMaxMeshDevices));
  require(coordination_timeout >= 1 && coordination_timeout <= kMaxCoordinationTimeout,
          "parallel.coordination_timeout", "in [1, 604800] (seconds: at most a week)",
          coordination_timeout);
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i] < 0 || devices[i] >= kMaxMeshDevices)
      throw UserError(fmt::format("parallel.devices[{}]: {} is not a device id (0 to {})", i,
                                  devices[i], kMaxMeshDevices - 1));
  if (!devices.empty() && static_cast<int64_t>(devices.size()) != size())
    throw UserError(fmt::format(
        "parallel.devices names {} devices, but the mesh data {} x fsdp {} x tensor {} has {}",
        devices.size(), data, fsdp, tensor, size()));
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        throw UserError(fmt::format("parallel.devices names device {} twice", devices[i]));
}

void WandbConfig::validate() const {
  if (!enabled()) return;
  if (project.empty())
    throw UserError(
        "logging.wandb.project is required when logging.wandb is given (the W&B project the run "
        "is filed under)");
  // W&B refuses these in project names and run ids.
  for (const auto& [key, v] :
       {std::pair{"logging.wandb.project", &project}, std::pair{"logging.wandb.id", &id}})
    if (v->find_first_of("/\\#?%:") != std::string::npos)
      throw UserError(
          fmt::format("{} must not hold any of / \\ # ? % : (got '{}')", key, excerpt(*v)));
  for (size_t i = 0; i < tags.size(); ++i)
    if (tags[i].empty()) throw UserError(fmt::format("logging.wandb.tags[{}] is empty", i));
}

}  // namespace lmt
