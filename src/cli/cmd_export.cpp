// `lmtrain export`: a checkpoint (or a run's newest one, or any Hugging Face directory: to change
// its dtype or sharding) as a Hugging Face model directory. The weights are read as
// load_hf_model reads them (open_hf_weights), but mapped, not loaded: f32 tensors go to
// save_hf_model as pointers into the mappings, so memory holds the mapped model plus one shard
// being converted (plus f32 copies of tensors stored in other dtypes).
#include <fmt/core.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "io/hf_export.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace lmt::cli {

namespace fs = std::filesystem;

namespace {

// The parameters as f32 views: into the mappings when stored as aligned f32, else converted
// copies kept in `owned`. open_hf_weights has matched and checked them as load_hf_model does.
std::vector<HfTensor> source_tensors(const HfWeights& w, std::vector<HostTensor>& owned) {
  std::vector<HfTensor> tensors;
  owned.reserve(w.entries.size());  // `tensors` points into it
  for (const HfWeights::Entry& e : w.entries) {
    const void* raw = e.file->raw(e.stored);
    if (e.file->meta(e.stored).dtype == DType::f32 &&
        reinterpret_cast<uintptr_t>(raw) % alignof(float) == 0) {
      tensors.push_back({e.param.name, e.param.shape, static_cast<const float*>(raw)});
    } else {
      owned.push_back(e.file->read_as(e.stored, DType::f32));
      tensors.push_back({e.param.name, e.param.shape, owned.back().ptr<float>()});
    }
  }
  return tensors;
}

}  // namespace

fs::path resolve_model_dir(const std::string& arg, const char* flag) {
  const fs::path dir = arg;
  if (!fs::exists(dir)) throw UserError(std::string(flag) + ": '" + arg + "' does not exist");
  if (fs::exists(dir / "config.json")) return dir;
  auto latest = find_latest_checkpoint(arg);
  if (!latest)
    throw UserError(std::string(flag) + ": '" + arg +
                    "' is neither a checkpoint (no config.json) nor a run with checkpoints");
  return *latest;
}

Run add_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, out, dtype = "bf16", max_shard = "5GB";
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--checkpoint", o->checkpoint,
                 "checkpoint directory (checkpoints/step_NNNNNNN), a run directory (its newest), "
                 "or a Hugging Face model directory")
      ->required();
  app.add_option("--out", o->out, "the Hugging Face model directory to write")->required();
  app.add_option("--dtype", o->dtype, "weights as bf16, f16 or f32")->capture_default_str();
  app.add_option("--max-shard-size", o->max_shard,
                 "split the weights into shards of at most this size (500MB, 5GB, bytes)")
      ->capture_default_str();
  return [o]() {
    HfExportOptions opt;
    opt.dtype = parse_export_dtype(o->dtype, "--dtype");
    opt.max_shard_bytes = parse_byte_size(o->max_shard, "--max-shard-size");
    const fs::path dir = resolve_model_dir(o->checkpoint, "--checkpoint");
    const ModelConfig cfg = read_hf_model_config(dir.string());
    const HfWeights weights = open_hf_weights(dir.string(), cfg);
    std::vector<HostTensor> owned;
    const std::vector<HfTensor> tensors = source_tensors(weights, owned);
    for (const char* name : {"tokenizer.json", "tokenizer.model"})
      if (fs::exists(dir / name)) {
        opt.tokenizer = (dir / name).string();
        break;
      }
    const HfExportResult r = save_hf_model(o->out, cfg, tensors, opt);
    fmt::print("exported {} to {}: {} {} weights in {} file{}{}\n", dir.string(), r.dir,
               format_bytes(r.tensor_bytes), dtype_name(opt.dtype), r.shards,
               r.shards == 1 ? "" : "s",
               opt.tokenizer.empty() ? " (no tokenizer files: the checkpoint has none)"
                                     : ", with " + fs::path(opt.tokenizer).filename().string());
    return 0;
  };
}

}  // namespace lmt::cli
