// save_hf_model: checks first (the config reads back, the tensors match the config's layout, the
// output directory may be replaced), then plans the shards as transformers does (tensors in order,
// a new shard when the next one would pass the limit), writes each shard from a buffer holding
// only that shard's converted bytes (f32 shards reference the source directly), and finally the
// JSON files and the tokenizer. Every file goes into OUT.tmp-PID, which is renamed into place.
#include "io/hf_export.h"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/output_lock.h"
#include "data/tokenizer/tokenizer.h"
#include "io/dir_checksums.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "io/sp_tokenizer_json.h"
#include "io/text_file.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// The safetensors metadata key that marks a directory as written by save_hf_model (so a later
// export may replace it).
constexpr const char* kExportMarker = "lmtrain_export";

bool is_export_file(const std::string& name) {
  static const std::set<std::string> fixed = {
      "config.json",           "generation_config.json",
      "model.safetensors",     "model.safetensors.index.json",
      "tokenizer.json",        "tokenizer.model",
      "tokenizer_config.json", kChecksumsFile};
  static const std::regex shard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return fixed.count(name) || std::regex_match(name, shard);
}

// A directory holding only what an export writes, whose weight files carry the marker.
bool is_previous_export(const fs::path& dir) {
  bool has_weights = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !is_export_file(name)) return false;
    if (e.path().extension() != ".safetensors") continue;
    try {
      if (!SafetensorsFile::open(e.path().string()).metadata().count(kExportMarker)) return false;
    } catch (const UserError&) {
      return false;
    }
    has_weights = true;
  }
  return has_weights;
}

// Tensor indices per shard: in order, a new shard when the next tensor would pass the limit.
std::vector<std::vector<size_t>> plan_shards(const std::vector<HfTensor>& tensors, size_t es,
                                             uint64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t used = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(tensors[i].shape.numel()) * es;
    if (!shards.back().empty() && used + bytes > max_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(i);
    used += bytes;
  }
  return shards;
}

// Converts one tensor into dst (numel 16-bit values).
void convert(const HfTensor& t, DType dt, uint16_t* dst) {
  const int64_t n = t.shape.numel();
  const bool bf16 = dt == DType::bf16;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16 ? f32_to_bf16(t.data[i]) : f32_to_f16(t.data[i]);
  if (bf16) return;  // bf16 has f32's range
  for (int64_t i = 0; i < n; ++i)
    if ((dst[i] & 0x7c00u) == 0x7c00u && std::isfinite(t.data[i]))  // became inf
      throw UserError(fmt::format(
          "export: tensor '{}' holds {} (element {}), beyond f16's range (65504): export as bf16 "
          "or f32",
          t.name, t.data[i], i));
}

std::string shard_name(size_t i, size_t n) {
  return n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n);
}

// Writes the weight files; returns their names (index last when sharded).
std::vector<std::string> write_weights(const fs::path& dir, const std::vector<HfTensor>& tensors,
                                       DType dt, uint64_t max_bytes, uint64_t* total) {
  const size_t es = dtype_size(dt);
  const auto shards = plan_shards(tensors, es, max_bytes);
  std::vector<std::string> files;
  nlohmann::json weight_map = nlohmann::json::object();
  *total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    int64_t numel = 0;
    for (size_t i : shards[s]) numel += tensors[i].shape.numel();
    std::vector<uint16_t> half(dt == DType::f32 ? 0 : static_cast<size_t>(numel));
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    w.set_metadata(kExportMarker, LMTRAIN_VERSION);
    int64_t at = 0;
    for (size_t i : shards[s]) {
      const HfTensor& t = tensors[i];
      if (dt == DType::f32) {
        w.add(t.name, dt, t.shape, t.data);
      } else {
        convert(t, dt, half.data() + at);
        w.add(t.name, dt, t.shape, half.data() + at);
        at += t.shape.numel();
      }
      weight_map[t.name] = name;
      *total += static_cast<uint64_t>(t.shape.numel()) * es;
    }
    w.write((dir / name).string());
    files.push_back(name);
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", *total}}},
                                  {"weight_map", weight_map}};
    write_text_file((dir / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    files.push_back("model.safetensors.index.json");
  }
  return files;
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("export: cannot read the tokenizer '" + path + "'");
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw UserError("export: the tokenizer '" + path + "' is not valid JSON");
  return j;
}

// Whether a tokenizer.json is Qwen2's pipeline: NFC, Qwen2's split (digits one by one), byte-level.
// transformers 5 builds a qwen2 model's tokenizer as its own Qwen2Tokenizer whatever
// tokenizer_config.json names (qwen2 is in its MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS): the
// vocabulary and merges of tokenizer.json under that pipeline. An `auto_map` entry is the one thing
// that sends AutoTokenizer to tokenizer_class instead (PreTrainedTokenizerFast, transformers 5's
// TokenizersBackend: tokenizer.json as it is), so a qwen2 export of another pipeline carries one.
bool is_qwen2_pipeline(const nlohmann::json& j) {
  static const std::string kQwen2Split =
      R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
  const nlohmann::json& n = j.value("normalizer", nlohmann::json());
  const nlohmann::json& p = j.value("pre_tokenizer", nlohmann::json());
  if (!n.is_object() || n.value("type", "") != "NFC") return false;
  if (!p.is_object() || p.value("type", "") != "Sequence") return false;
  const nlohmann::json& seq = p.value("pretokenizers", nlohmann::json());
  if (!seq.is_array() || seq.size() != 2 || !seq[0].is_object() || !seq[1].is_object())
    return false;
  const nlohmann::json& split = seq[0];
  const nlohmann::json& bl = seq[1];
  const nlohmann::json pattern = split.value("pattern", nlohmann::json());
  return split.value("type", "") == "Split" && pattern.is_object() &&
         pattern.value("Regex", "") == kQwen2Split && split.value("behavior", "") == "Isolated" &&
         !split.value("invert", true) && bl.value("type", "") == "ByteLevel" &&
         !bl.value("add_prefix_space", true) && !bl.value("use_regex", true);
}

// tokenizer_config.json: enough for AutoTokenizer, and apply_chat_template when a chat template
// is given. The tokenizer.json loads as it is through PreTrainedTokenizerFast (transformers 5:
// TokenizersBackend), its post-processor adding the special tokens; for a SentencePiece model
// that is the tokenizer.json written beside it (sp_tokenizer_json.h). Where a SentencePiece model
// has none, it is declared a LlamaTokenizer (BOS added, as lmtrain's SentencePiece tokenizer
// does; transformers 5 then drops its normalizer). Special tokens are named only where the
// tokenizer has them, since transformers 5 adds a named special token that the vocabulary lacks.
nlohmann::json tokenizer_config(const std::string& path, const ModelConfig& cfg,
                                const Tokenizer& tok, const nlohmann::json& tokenizer_json,
                                const std::string& chat_template) {
  const bool sentencepiece = fs::path(path).extension() == ".model";
  const int64_t bos = cfg.bos_token_id >= 0 ? cfg.bos_token_id : tok.bos_id();
  const int64_t eos = cfg.eos_token_id >= 0 ? cfg.eos_token_id : tok.eos_id();
  nlohmann::json tc = {{"model_max_length", cfg.max_position_embeddings},
                       {"clean_up_tokenization_spaces", false}};
  if (!chat_template.empty()) tc["chat_template"] = chat_template;
  if (sentencepiece) {
    sentencepiece::SentencePieceProcessor sp;
    if (!sp.Load(path).ok()) throw UserError("export: cannot load the tokenizer '" + path + "'");
    auto piece = [&](int64_t id) { return sp.IdToPiece(static_cast<int>(id)); };
    if (bos >= 0 && bos < sp.GetPieceSize()) tc["bos_token"] = piece(bos);
    if (eos >= 0 && eos < sp.GetPieceSize()) tc["eos_token"] = piece(eos);
    if (sp.unk_id() >= 0) tc["unk_token"] = piece(sp.unk_id());
    if (tokenizer_json.is_null()) {
      tc["tokenizer_class"] = "LlamaTokenizer";
      tc["add_bos_token"] = sp.bos_id() >= 0;
      tc["add_eos_token"] = false;
      tc["legacy"] = true;
      return tc;
    }
  }
  tc["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (cfg.family == "qwen2" && !is_qwen2_pipeline(tokenizer_json))
    tc["auto_map"] = {{"AutoTokenizer", {nullptr, "PreTrainedTokenizerFast"}}};
  if (sentencepiece) return tc;
  const nlohmann::json& added = tokenizer_json.value("added_tokens", nlohmann::json());
  if (added.is_array()) {
    for (const auto& a : added) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content")) continue;
      if (a["id"] == bos) tc["bos_token"] = a["content"];
      if (a["id"] == eos) tc["eos_token"] = a["content"];
    }
  }
  return tc;
}

// Copies the tokenizer under its Hugging Face name and writes tokenizer_config.json; a
// SentencePiece model gets a tokenizer.json beside it (a warning where it cannot have one).
std::vector<std::string> write_tokenizer(const fs::path& dir, const std::string& path,
                                         const ModelConfig& cfg, const std::string& chat_template) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(path);
  if (tok->vocab_size() > cfg.vocab_size)
    throw UserError(
        fmt::format("export: the tokenizer '{}' has {} tokens, more than the model's vocab_size {}",
                    path, tok->vocab_size(), cfg.vocab_size));
  const bool sentencepiece = fs::path(path).extension() == ".model";
  const std::string name = sentencepiece ? "tokenizer.model" : "tokenizer.json";
  std::error_code ec;
  fs::copy_file(path, dir / name, fs::copy_options::overwrite_existing, ec);
  if (ec) throw UserError("export: cannot copy the tokenizer '" + path + "': " + ec.message());
  std::vector<std::string> files = {name};
  nlohmann::json tokenizer_json;
  if (!sentencepiece) {
    tokenizer_json = read_json_file(path);
  } else {
    SpTokenizerJson converted = sentencepiece_tokenizer_json(path);
    tokenizer_json = std::move(converted.json);
    if (tokenizer_json.is_null()) {
      fmt::print(stderr,
                 "export: warning: no tokenizer.json for the SentencePiece model '{}', since {}; "
                 "transformers loads tokenizer.model without its normalizer\n",
                 path, converted.why_not);
    } else {
      write_text_file((dir / "tokenizer.json").string(), tokenizer_json.dump(2) + "\n");
      files.push_back("tokenizer.json");
    }
  }
  write_text_file((dir / "tokenizer_config.json").string(),
                  tokenizer_config(path, cfg, *tok, tokenizer_json, chat_template).dump(2) + "\n");
  files.push_back("tokenizer_config.json");
  return files;
}

std::vector<std::string> write_configs(const fs::path& dir, const ModelConfig& cfg, DType dt) {
  nlohmann::json j = model_config_to_hf(cfg);
  j["torch_dtype"] = torch_dtype_name(dt);  // transformers 4's key
  j["dtype"] = torch_dtype_name(dt);        // transformers 5's
  write_text_file((dir / "config.json").string(), j.dump(2) + "\n");
  std::vector<std::string> files = {"config.json"};
  if (cfg.bos_token_id >= 0 || cfg.eos_token_id >= 0) {
    nlohmann::json g = nlohmann::json::object();
    if (cfg.bos_token_id >= 0) g["bos_token_id"] = cfg.bos_token_id;
    if (cfg.eos_token_id >= 0) g["eos_token_id"] = cfg.eos_token_id;
    write_text_file((dir / "generation_config.json").string(), g.dump(2) + "\n");
    files.push_back("generation_config.json");
  }
  return files;
}

// Where the export goes: refuses a file, or a non-empty directory that no export wrote.
fs::path output_path(const std::string& out_dir) {
  if (out_dir.empty()) throw UserError("export: the output directory name is empty");
  fs::path out = fs::path(out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      throw UserError("export: '" + out.string() + "' exists and is not a directory");
    if (!fs::is_empty(out, ec) && !is_previous_export(out))
      throw UserError("export: '" + out.string() +
                      "' exists and is not empty (only a previous lmtrain export is replaced); "
                      "choose another --out or remove it");
  }
  return out;
}

}  // namespace

void check_export_tensors(const ModelConfig& cfg, const std::vector<HfTensor>& tensors) {
  std::map<std::string, Shape> want;
  for (const ParamInfo& p : param_layout(cfg)) want[p.name] = p.shape;
  std::set<std::string> seen;
  for (const HfTensor& t : tensors) {
    auto it = want.find(t.name);
    if (it == want.end())
      throw UserError("export: tensor '" + t.name + "' is not a parameter of this " + cfg.family +
                      " model");
    if (!seen.insert(t.name).second) throw UserError("export: tensor '" + t.name + "' given twice");
    if (t.shape != it->second)
      throw UserError("export: tensor '" + t.name + "' has shape " + t.shape.str() +
                      ", the config expects " + it->second.str());
    LMT_CHECK(t.data != nullptr || t.shape.numel() == 0, "export: tensor without data");
  }
  for (const auto& [name, shape] : want)
    if (!seen.count(name)) throw UserError("export: tensor '" + name + "' is missing");
}

uint64_t parse_byte_size(const std::string& s, const std::string& what) {
  static const std::regex re(R"(\s*([0-9]+(\.[0-9]+)?)\s*([a-zA-Z]*)\s*)");
  std::smatch m;
  auto bad = [&] {
    return UserError(what + ": '" + s +
                     "' is not a size (expected bytes, or a number with B, KB, MB, GB, TB, KiB, "
                     "MiB, GiB or TiB, e.g. 500MB)");
  };
  if (!std::regex_match(s, m, re)) throw bad();
  std::string unit = m[3].str();
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  static const std::map<std::string, double> scale = {{"", 1},
                                                      {"b", 1},
                                                      {"kb", 1e3},
                                                      {"mb", 1e6},
                                                      {"gb", 1e9},
                                                      {"tb", 1e12},
                                                      {"kib", 1024.0},
                                                      {"mib", 1048576.0},
                                                      {"gib", 1073741824.0},
                                                      {"tib", 1099511627776.0}};
  auto it = scale.find(unit);
  if (it == scale.end()) throw bad();
  const double bytes = std::strtod(m[1].str().c_str(), nullptr) * it->second;  // inf if huge
  if (bytes < 1) throw UserError(what + ": '" + s + "' must be at least 1 byte");
  if (!(bytes <= 1e18)) throw UserError(what + ": '" + s + "' is too large (at most 1000 PB)");
  return static_cast<uint64_t>(bytes);
}

DType parse_export_dtype(const std::string& s, const std::string& what) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::f16;
  throw UserError(what + ": unknown dtype '" + s + "' (expected bf16, f16 or f32)");
}

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      return "float32";
  }
}

HfExportResult save_hf_model(const std::string& out_dir, const ModelConfig& cfg,
                             const std::vector<HfTensor>& tensors, const HfExportOptions& opt) {
  LMT_CHECK(opt.dtype == DType::f32 || opt.dtype == DType::bf16 || opt.dtype == DType::f16,
            "export: dtype must be f32, bf16 or f16");
  if (opt.max_shard_bytes == 0) throw UserError("export: the maximum shard size must be > 0");
  check_config_json_holds(cfg, "export");
  check_export_tensors(cfg, tensors);
  const fs::path out = output_path(out_dir);
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const OutputLock lock = lock_output_path(out.string(), "--out");
  remove_dead_writers_leftovers(out, [](const fs::path& d) { return is_previous_export(d); });
  const fs::path tmp = out.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  HfExportResult r;
  r.dir = out.string();
  try {
    r.files = write_configs(tmp, cfg, opt.dtype);
    for (const std::string& f :
         write_weights(tmp, tensors, opt.dtype, opt.max_shard_bytes, &r.tensor_bytes))
      r.files.push_back(f);
    r.shards = static_cast<int64_t>(
        std::count_if(r.files.begin(), r.files.end(),
                      [](const std::string& f) { return f.ends_with(".safetensors"); }));
    if (!opt.tokenizer.empty())
      for (const std::string& f : write_tokenizer(tmp, opt.tokenizer, cfg, opt.chat_template))
        r.files.push_back(f);
    ChecksumRecorder checksums(tmp.string());
    for (const std::string& f : r.files) checksums.add(f);
    checksums.write();
    r.files.push_back(kChecksumsFile);
    // Replace a previous export only now that the new one is complete.
    const fs::path old = out.string() + ".old-" + std::to_string(::getpid());
    const bool replace = fs::exists(out);
    if (replace) fs::rename(out, old);
    fs::rename(tmp, out);
    if (replace) fs::remove_all(old);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return r;
}

std::vector<HfTensor> model_hf_tensors(const Transformer& model, std::vector<float>& storage) {
  const DType dt = model.dtype();
  const float* values = static_cast<const float*>(model.backend()->host_address(model.params_data()));
  if (dt == DType::f32 && values) {
    // Host memory already: export from it directly.
  } else if (dt == DType::f32) {
    storage.resize(static_cast<size_t>(model.flat_size()));
    model.backend()->to_host(storage.data(), model.params_data(), storage.size() * sizeof(float));
    values = storage.data();
  } else {  // f64 (gradient checks): narrowed to f32 first
    storage.resize(static_cast<size_t>(model.flat_size()));
    std::vector<uint8_t> raw(storage.size() * dtype_size(dt));
    model.backend()->to_host(raw.data(), model.params_data(), raw.size());
    for (size_t i = 0; i < storage.size(); ++i)
      storage[i] = static_cast<float>(load_element(dt, raw.data(), static_cast<int64_t>(i)));
    values = storage.data();
  }
  std::vector<HfTensor> tensors;
  for (const ParamInfo& p : model.params()) tensors.push_back({p.name, p.shape, values + p.offset});
  return tensors;
}

HfExportResult save_hf_model(const std::string& out_dir, const Transformer& model,
                             const HfExportOptions& opt) {
  std::vector<float> storage;
  return save_hf_model(out_dir, model.config(), model_hf_tensors(model, storage), opt);
}

HfWeightsOnDisk hf_weights_on_disk(const std::string& dir) {
  HfWeightsOnDisk w;
  if (!fs::exists(fs::path(dir) / "model.safetensors") &&
      !fs::exists(fs::path(dir) / "model.safetensors.index.json"))
    return w;
  const std::map<std::string, SafetensorsFile> files = open_hf_weight_files(dir);
  std::set<std::string> dtypes;
  for (const auto& [path, st] : files) {
    for (const std::string& n : st.names()) {
      w.bytes += st.meta(n).nbytes();
      dtypes.insert(st.meta(n).file_dtype);
    }
  }
  w.files = static_cast<int64_t>(files.size());
  w.dtypes.assign(dtypes.begin(), dtypes.end());
  return w;
}

}  // namespace lmt
