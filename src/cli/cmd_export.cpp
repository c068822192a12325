// `lmtrain export`: a checkpoint (or a run's newest one, or any Hugging Face directory: to change
// its dtype or sharding) as a Hugging Face model directory. The weight files are mapped, not
// loaded: f32 tensors go to save_hf_model as pointers into the mappings, so memory holds the
// mapped model plus one shard being converted (plus f32 copies of tensors stored in other dtypes).
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

// The parameters as f32 views (into the mappings when stored as aligned f32, else converted
// copies kept in `owned`), checked against the config's layout. As load_hf_model does, RoPE
// caches and a tied model's stored copy of the head are passed over; any other extra is an error.
std::vector<HfTensor> source_tensors(const std::map<std::string, const SafetensorsFile*>& where,
                                     const ModelConfig& cfg, std::vector<HostTensor>& owned,
                                     const std::string& dir) {
  std::vector<HfTensor> tensors;
  std::set<std::string> wanted;
  for (const ParamInfo& p : Transformer::param_layout(cfg)) {
    wanted.insert(p.name);
    auto it = where.find(p.name);
    if (it == where.end()) throw UserError(dir + ": tensor '" + p.name + "' is missing");
    const SafetensorsFile& st = *it->second;
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
  for (const auto& [name, st] : where) {
    if (wanted.count(name) || name.ends_with(".rotary_emb.inv_freq")) continue;
    if (cfg.tie_word_embeddings && name == "lm_head.weight") continue;
    throw UserError(st->path() + ": unexpected tensor '" + name + "' for this " + cfg.family +
                    " model");
  }
  return tensors;
}

}  // namespace

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
    const fs::path dir = resolve_checkpoint(o->checkpoint);
    const ModelConfig cfg = read_hf_model_config(dir.string());
    const std::vector<std::string> files = hf_weight_files(dir.string());
    if (files.empty())
      throw UserError(dir.string() +
                      ": neither model.safetensors nor model.safetensors.index.json");
    std::vector<SafetensorsFile> mapped;
    mapped.reserve(files.size());  // `where` points into it
    std::map<std::string, const SafetensorsFile*> where;
    for (const std::string& f : files) {
      mapped.push_back(SafetensorsFile::open(f));
      for (const std::string& n : mapped.back().names())
        if (!where.emplace(n, &mapped.back()).second)
          throw UserError(f + ": tensor '" + n + "' is also in " + where.at(n)->path());
    }
    std::vector<HostTensor> owned;
    owned.reserve(where.size());
    const std::vector<HfTensor> tensors = source_tensors(where, cfg, owned, dir.string());
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
