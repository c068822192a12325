// load_hf_model: the weight files of a directory are opened once (one, or every shard the index
// names, checked to exist before any is read), each parameter is found by its Hugging Face name,
// and its shape and dtype are checked before it is converted into the flat parameter buffer.
#include "io/hf_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_depth.h"
#include "core/regular_file.h"
#include "io/dir_checksums.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// Tensors that checkpoints in the wild carry but that are not parameters (RoPE caches, gpt2's
// causal-mask buffers).
bool is_ignored_buffer(const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq") || name.ends_with(".attn.bias") ||
         name.ends_with(".attn.masked_bias");
}

// The stored name of a parameter: as lmtrain names it; for gpt2 checkpoints saved from the bare
// GPT2Model (as the original gpt2 files are) without the "transformer." prefix; for the text model
// of a multimodal gemma3, under model.language_model. (transformers 5) or language_model.model.
// (the released files).
std::string stored_name(const std::map<std::string, std::string>& where, const std::string& name) {
  if (where.count(name)) return name;
  std::vector<std::string> candidates;
  const std::string gpt2 = "transformer.", llama = "model.";
  if (name.starts_with(gpt2)) candidates.push_back(name.substr(gpt2.size()));
  if (name.starts_with(llama)) {
    candidates.push_back("model.language_model." + name.substr(llama.size()));
    candidates.push_back("language_model." + name);
  }
  if (name == "lm_head.weight") candidates.push_back("language_model.lm_head.weight");
  for (const std::string& c : candidates)
    if (where.count(c)) return c;
  return name;
}

// The vision tower and projector of a multimodal gemma3: not part of the text model.
bool is_vision_tensor(const std::string& name) {
  for (const char* p : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                        "model.multi_modal_projector."})
    if (name.starts_with(p)) return true;
  return false;
}

// Which file holds each tensor, and the opened files.
struct WeightFiles {
  std::map<std::string, SafetensorsFile> files;  // path -> file
  std::map<std::string, std::string> where;      // tensor -> path
};

WeightFiles open_weights(const fs::path& dir) {
  WeightFiles w;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) {
    SafetensorsFile f = SafetensorsFile::open(single.string());
    for (const std::string& n : f.names()) w.where[n] = single.string();
    w.files.emplace(single.string(), std::move(f));
    return w;
  }
  if (!fs::exists(index))
    throw UserError(dir.string() + ": neither model.safetensors nor model.safetensors.index.json");
  auto j = parse_json_bounded(read_regular_file(index.string(), "model", kMaxConfigBytes),
                              index.string());
  if (j.is_discarded()) throw UserError(index.string() + ": not valid JSON");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw UserError(index.string() + ": no 'weight_map' object");
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string())
      throw UserError(index.string() + ": weight_map entry '" + tensor + "' is not a file name");
    const std::string name = shard.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "..")
      throw UserError(index.string() + ": shard '" + name + "' of tensor '" + tensor +
                      "' is not a plain file name");
    const fs::path p = dir / name;
    if (!w.files.count(p.string())) {
      if (!fs::exists(p))
        throw UserError(index.string() + ": shard '" + name + "' (tensor '" + tensor +
                        "') does not exist");
      w.files.emplace(p.string(), SafetensorsFile::open(p.string()));
    }
    if (!w.files.at(p.string()).contains(tensor))
      throw UserError(p.string() + ": tensor '" + tensor + "' is missing (" +
                      index.filename().string() + " places it there)");
    w.where[tensor] = p.string();
  }
  // Tensors in shards that the index does not list are extras too.
  for (const auto& [path, f] : w.files)
    for (const std::string& n : f.names())
      if (!w.where.count(n))
        throw UserError(path + ": tensor '" + n + "' is not listed in " + index.string());
  return w;
}

}  // namespace

ModelConfig read_hf_model_config(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  if (!fs::is_directory(dir)) throw UserError("model directory '" + dir + "' does not exist");
  if (!fs::exists(cfg)) throw UserError("'" + cfg.string() + "' not found");
  return read_hf_config(cfg.string());
}

std::map<std::string, SafetensorsFile> open_hf_weight_files(const std::string& dir) {
  return open_weights(dir).files;
}

HfWeights open_hf_weights(const std::string& dir, const ModelConfig& cfg) {
  WeightFiles w = open_weights(dir);
  bool multimodal = false;
  {
    const fs::path config = fs::path(dir) / "config.json";
    std::error_code ec;
    const auto j =
        fs::exists(config, ec)
            ? parse_json_bounded(read_regular_file(config.string(), "config.json", kMaxConfigBytes),
                                 config.string())
            : nlohmann::json(nlohmann::json::value_t::discarded);
    multimodal = !j.is_discarded() && is_multimodal_gemma3(j);
  }
  HfWeights out;
  out.files = std::move(w.files);  // a map's nodes, and so the pointers below, survive the move
  std::set<std::string> wanted;
  for (const ParamInfo& p : param_layout(cfg)) {
    const std::string name = stored_name(w.where, p.name);
    wanted.insert(name);
    auto it = w.where.find(name);
    if (it == w.where.end())
      throw UserError(dir + ": tensor '" + p.name + "' is missing from the weights");
    const SafetensorsFile& f = out.files.at(it->second);
    const SafetensorsMeta& m = f.meta(name);
    const bool floating = m.dtype && (*m.dtype == DType::f32 || *m.dtype == DType::f64 ||
                                      *m.dtype == DType::bf16 || *m.dtype == DType::f16);
    if (!floating)
      throw UserError(f.path() + ": tensor '" + name + "' has dtype " + m.file_dtype +
                      " (expected F32, BF16, F16 or F64)");
    if (m.shape != p.shape)
      throw UserError(f.path() + ": tensor '" + name + "' has shape " + m.shape.str() +
                      ", the model expects " + p.shape.str());
    out.entries.push_back(HfWeights::Entry{p, &f, name});
  }
  for (const auto& [name, path] : w.where) {
    if (wanted.count(name) || is_ignored_buffer(name)) continue;
    if (multimodal && is_vision_tensor(name)) continue;
    // Some tied checkpoints also store the head (a copy of the embedding); it is not used.
    if (cfg.tie_word_embeddings &&
        (name == "lm_head.weight" || name == "language_model.lm_head.weight"))
      continue;
    throw UserError(path + ": unexpected tensor '" + name + "' for this " + cfg.family + " model");
  }
  return out;
}

void load_hf_weights(const std::string& dir, Transformer& model) {
  load_verified(dir, [&] { load_hf_weights_unverified(dir, model); });
}

void load_hf_weights_unverified(const std::string& dir, Transformer& model) {
  const HfWeights w = open_hf_weights(dir, model.config());
  for (const HfWeights::Entry& e : w.entries) {
    HostTensor t = e.file->read_as(e.stored, model.dtype());
    char* dst = static_cast<char*>(model.params_data()) +
                static_cast<size_t>(e.param.offset) * dtype_size(model.dtype());
    model.backend()->from_host(dst, t.data(), t.nbytes());
  }
}

std::unique_ptr<Transformer> load_hf_model(const std::string& dir, Backend* be, DType dt) {
  std::unique_ptr<Transformer> model;
  load_verified(dir, [&] {
    const ModelConfig cfg = read_hf_model_config(dir);
    ModelWeights::check_fits(cfg, dt, physical_memory_bytes());  // before any allocation
    model = std::make_unique<Transformer>(be, cfg, dt);
    load_hf_weights_unverified(dir, *model);
  });
  return model;
}

}  // namespace lmt
