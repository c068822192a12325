// `lmtrain export`: a checkpoint (or a run's newest one) as a Hugging Face model directory. The
// checkpoint's model.safetensors is mapped, not loaded: its f32 tensors go to save_hf_model as
// pointers into the mapping, so memory holds the mapped model plus one shard being converted.
#include <fmt/core.h>

#include <cstdint>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "io/hf_export.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace lmt::cli {

namespace fs = std::filesystem;

namespace {

// The checkpoint directory named by --checkpoint: itself, or a run's newest checkpoint.
fs::path resolve_checkpoint(const std::string& arg) {
  const fs::path dir = arg;
  if (!fs::exists(dir)) throw UserError("--checkpoint: '" + arg + "' does not exist");
  if (fs::exists(dir / "config.json")) return dir;
  auto latest = find_latest_checkpoint(arg);
  if (!latest)
    throw UserError("--checkpoint: '" + arg +
                    "' is neither a checkpoint (no config.json) nor a run with checkpoints");
  return *latest;
}

// The checkpoint's parameters as f32 views (into the mapping when stored as aligned f32, else
// converted copies kept in `owned`), checked against the config's layout.
std::vector<HfTensor> checkpoint_tensors(const SafetensorsFile& st, const ModelConfig& cfg,
                                         std::vector<HostTensor>& owned) {
  std::vector<HfTensor> tensors;
  const std::vector<ParamInfo> layout = Transformer::param_layout(cfg);
  for (const ParamInfo& p : layout) {
    if (!st.contains(p.name)) throw UserError(st.path() + ": tensor '" + p.name + "' is missing");
    const SafetensorsMeta& m = st.meta(p.name);
    if (m.shape != p.shape)
      throw UserError(st.path() + ": tensor '" + p.name + "' has shape " + m.shape.str() +
                      ", config.json expects " + p.shape.str());
    const void* raw = st.raw(p.name);
    if (m.dtype == DType::f32 && reinterpret_cast<uintptr_t>(raw) % alignof(float) == 0) {
      tensors.push_back({p.name, p.shape, static_cast<const float*>(raw)});
    } else {
      owned.push_back(st.read_as(p.name, DType::f32));  // checks the dtype is a float one
      tensors.push_back({p.name, p.shape, owned.back().ptr<float>()});
    }
  }
  if (st.size() != layout.size())
    for (const std::string& n : st.names())
      if (std::none_of(layout.begin(), layout.end(),
                       [&](const ParamInfo& p) { return p.name == n; }))
        throw UserError(st.path() + ": unexpected tensor '" + n + "' for this " + cfg.family +
                        " model");
  return tensors;
}

}  // namespace

Run add_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, out, dtype = "bf16", max_shard = "5GB";
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--checkpoint", o->checkpoint,
                 "checkpoint directory (checkpoints/step_NNNNNNN) or a run directory (its newest)")
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
    const fs::path dir = resolve_checkpoint(o->checkpoint);
    const ModelConfig cfg = read_hf_model_config(dir.string());
    const fs::path weights = dir / "model.safetensors";
    if (!fs::exists(weights)) throw UserError("'" + weights.string() + "' not found");
    const SafetensorsFile st = SafetensorsFile::open(weights.string());
    std::vector<HostTensor> owned;
    owned.reserve(st.size());  // views into it must not move
    const std::vector<HfTensor> tensors = checkpoint_tensors(st, cfg, owned);
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
