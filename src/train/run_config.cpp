// A RunConfig as a whole: the checks between its sections, loading it from YAML, saving and
// hashing it. Loading reads the file into a YAML tree, applies --set overrides to the tree (so an
// override is checked exactly like a file key), fills the sections through config_yaml.h, imports
// train.init_from and lora.init_from (init_from.h) and validates; every failure is one UserError
// naming the file.
#include "train/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/config_base.h"
#include "io/config_yaml.h"
#include "io/hf_config.h"
#include "model/lora.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"
#include "train/init_from.h"

namespace lmt {

namespace {

// data.seq_len and data.tokenizer against the model they feed.
void check_data_fits_model(const DataConfig& d, const ModelConfig& m) {
  if (d.seq_len > m.max_position_embeddings)
    throw UserError(fmt::format("data.seq_len ({}) must be <= model.max_position_embeddings ({})",
                                d.seq_len, m.max_position_embeddings));
  if (d.tokenizer == "bytes" && m.vocab_size < 257)
    throw UserError(
        fmt::format("model.vocab_size ({}) must be >= 257 for data.tokenizer 'bytes' "
                    "(256 byte ids + end-of-text)",
                    m.vocab_size));
}

// The mesh runs on pjrt, and every axis divides what the sharding plan splits over it: one
// message naming the key and both numbers.
void check_mesh_divides(const ParallelConfig& p, const TrainConfig& t, const ModelConfig& m) {
  if (p.size() > 1 && t.backend != "pjrt")
    throw UserError(
        fmt::format("parallel: a mesh of {} devices needs train.backend: pjrt (it is '{}')",
                    p.size(), t.backend));
  auto divides = [](int64_t ways, const char* axis, int64_t n, const std::string& what) {
    if (n % ways != 0)
      throw UserError(
          fmt::format("parallel.{} is {}, which does not divide {} ({})", axis, ways, what, n));
  };
  if (t.micro_batch_size % (p.data * p.fsdp) != 0)
    throw UserError(fmt::format(
        "parallel.data x parallel.fsdp is {} x {} = {}, which does not divide "
        "train.micro_batch_size ({}): each of those devices takes an equal share of the batch",
        p.data, p.fsdp, p.data * p.fsdp, t.micro_batch_size));
  divides(p.fsdp, "fsdp", m.hidden_size, "model.hidden_size");
  divides(p.tensor, "tensor", m.num_attention_heads, "model.num_attention_heads");
  divides(p.tensor, "tensor", m.kv_heads(), "model.num_key_value_heads");
  divides(p.tensor, "tensor", m.intermediate_size, "model.intermediate_size");
  divides(p.tensor, "tensor", m.vocab_size, "model.vocab_size");
}

// LoRA's adapters against the precision, the optimizer and the model they adapt.
void check_lora_fits(const RunConfig& c) {
  const LoraSpec& lora = c.lora;
  if (lora.base_dtype == "bf16" && c.train.precision == "bf16")
    throw UserError(
        "lora.base_dtype: bf16 holds the frozen base in bf16 for f32 compute; with "
        "train.precision: bf16 the base is computed with in bf16 already (leave lora.base_dtype "
        "at f32)");
  if (c.optimizer.name == "muon" && lora.rank > 0)
    throw UserError(
        "optimizer.name: muon orthogonalises the updates of hidden weight matrices, and a LoRA run "
        "trains adapters of rank lora.rank instead (use adamw, lion or sgd with lora)");
  if (lora.rank > 0) lora_layout(c.model, lora);  // names and sizes, one message
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  data.validate();
  check_data_fits_model(data, model);
  train.validate();
  loss.validate();
  if (loss.impl == "cut" && lora.base_dtype == "bf16")
    throw UserError(
        "loss.impl: cut needs the output head in the model's dtype, and lora.base_dtype: bf16 "
        "holds it in bf16 (use loss.impl: chunked, or lora.base_dtype: f32)");
  optimizer.validate();
  logging.validate();
  eval.validate();
  parallel.validate();
  check_mesh_divides(parallel, train, model);
  lora.validate();
  check_lora_fits(*this);
  if (train.activation_bits == 1) {
    const std::string why = Transformer::activation_bits_unsupported(model);
    if (!why.empty()) throw UserError("train.activation_bits: 1 " + why);
  }
}

namespace {

// PEFT's spelling `target_modules: all-linear` (a string, as PEFT and LoRA recipes write it) is
// read as the list [all-linear]. Another string is PEFT's regular expression, which lmtrain does
// not take: one message saying so.
void accept_peft_target_modules(YAML::Node& root, const ConfigSource& src) {
  const YAML::Node& tree = root;
  const YAML::Node lora = tree["lora"];
  if (!lora || !lora.IsMap()) return;
  const YAML::Node t = lora["target_modules"];
  if (!t || !t.IsScalar()) return;
  if (t.Scalar() != "all-linear")
    config_detail::fail(src, t, "lora.target_modules",
                        "key 'lora.target_modules': expected a list of module names or all-linear, "
                        "got '" +
                            t.Scalar() +
                            "' (PEFT reads a string as a regular expression; lmtrain takes names)");
  YAML::Node list(YAML::NodeType::Sequence);
  list.push_back("all-linear");
  root["lora"]["target_modules"] = list;
}

// The section `name` of a config tree, or an undefined node when it is absent or not a map.
YAML::Node section_of(const YAML::Node& tree, const char* name) {
  return tree[name] && tree[name].IsMap() ? tree[name] : YAML::Node();
}

// A section's key as text, "" when the section or the key is absent or the key is not a scalar.
std::string scalar_of(const YAML::Node& section, const char* key) {
  return section && section[key] && section[key].IsScalar() ? section[key].as<std::string>() : "";
}

// The node at a dotted key ("data.sources[1].weight") of `tree`, or an undefined node.
YAML::Node node_at(const YAML::Node& tree, const std::string& key) {
  YAML::Node cur = tree;
  size_t b = 0;
  while (b < key.size() && cur.IsDefined()) {
    const size_t e = key.find_first_of(".[", b);
    const std::string name = key.substr(b, e == std::string::npos ? e : e - b);
    if (!name.empty())
      cur.reset(cur.IsMap() ? static_cast<const YAML::Node&>(cur)[name] : YAML::Node());
    if (e == std::string::npos) break;
    if (key[e] == '[') {
      const size_t close = key.find(']', e);
      if (close == std::string::npos || !cur.IsSequence()) return YAML::Node();
      const size_t i = std::stoul(key.substr(e + 1, close - e - 1));
      if (i >= cur.size()) return YAML::Node();
      cur.reset(static_cast<const YAML::Node&>(cur)[i]);
      b = close + 1 < key.size() && key[close + 1] == '.' ? close + 2 : close + 1;
    } else {
      b = e + 1;
    }
  }
  return cur;
}

// Where a validation message belongs: a message starts with the key it is about ("train.lr must
// be > 0"); when a base file gave that key (and no --set touched it), that file and line, else
// the config file.
std::string where_given(const YAML::Node& tree, const ConfigSource& src, const std::string& msg) {
  if (src.bases.empty()) return src.file;
  const size_t end =
      msg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
  const std::string key = msg.substr(0, end);
  if (key.empty() || key.find('.') == std::string::npos) return src.file;
  for (const ConfigOverride& o : src.overrides)
    if (o.path.compare(0, key.size(), key) == 0 || key.compare(0, o.path.size(), o.path) == 0)
      return src.file;
  YAML::Node at;
  try {
    at = node_at(tree, key);
  } catch (const std::exception&) {  // an index too long for stoul: no such element
    return src.file;
  }
  if (!at.IsDefined()) return src.file;
  const std::string file = config_detail::file_of(src, at);
  return at.Mark().is_null() ? file : file + ":" + std::to_string(at.Mark().line + 1);
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  ConfigTree read = load_config_tree(path);
  YAML::Node root = read.root;
  ConfigSource src{path, {}, std::move(read.bases)};
  check_config_root(root, src);
  src.overrides = apply_overrides(root, overrides);
  RunConfig cfg;
  const YAML::Node& tree = root;  // const: looking a key up must not add it
  accept_peft_target_modules(root, src);
  // A section's defaults may depend on one of its keys: model.family picks those of the model keys
  // the file leaves out (gemma2's soft-caps and window pattern, gpt2's activation, ...),
  // optimizer.name those of the optimizer (lion's beta2, muon's momentum). An unknown family or
  // name is reported by validate() below.
  const YAML::Node model = section_of(tree, "model");
  if (const std::string family = scalar_of(model, "family"); !family.empty()) {
    try {
      cfg.model = family_defaults(family);
    } catch (const UserError&) {
    }
  }
  if (const std::string name = scalar_of(section_of(tree, "optimizer"), "name"); !name.empty())
    cfg.optimizer = optimizer_defaults(name);
  read_config(root, cfg, src);
  // An empty logging.wandb section asks for a W&B run as much as a full one (config.yaml's
  // resolved section, every key empty, does not: it lists the defaults).
  const YAML::Node logging = section_of(tree, "logging");
  if (logging && logging["wandb"] && (logging["wandb"].IsNull() || logging["wandb"].size() == 0) &&
      cfg.logging.wandb.project.empty())
    throw UserError(path +
                    ": logging.wandb.project is required when logging.wandb is given (the W&B "
                    "project the run is filed under)");
  std::vector<std::string> model_keys;  // the model keys the file and the overrides give
  if (model)
    for (const auto& kv : model) model_keys.push_back(kv.first.as<std::string>());
  derive_unset_keys(cfg.model, model_keys);
  if (!cfg.train.init_from.empty()) {
    const bool tokenizer_set = tree["data"] && tree["data"].IsMap() && tree["data"]["tokenizer"];
    import_init_from(cfg, model_keys, tokenizer_set, path);
  }
  try {
    import_lora_init_from(cfg);
    cfg.validate();
    check_config_json_holds(cfg.model, "model");
  } catch (const UserError& e) {
    throw UserError(where_given(tree, src, e.what()) + ": " + e.what());
  }
  cfg.config_file = path;
  for (const ConfigFile& b : src.bases) cfg.base_files.push_back(b.name);
  cfg.overrides = overrides;
  return cfg;
}

std::vector<std::string> source_names(const DataConfig& d) {
  std::vector<std::string> names;
  for (const SourceConfig& s : d.sources) {
    std::string base = s.name;
    if (base.empty()) {
      std::filesystem::path p(s.path);
      if (!p.has_filename()) p = p.parent_path();  // "dir/"
      base = p.stem().string();
      if (base.empty()) base = "source";
    }
    std::string name = base;
    for (int k = 2; std::find(names.begin(), names.end(), name) != names.end(); ++k)
      name = base + "_" + std::to_string(k);
    names.push_back(name);
  }
  return names;
}

BackendOptions backend_options(const RunConfig& cfg) {
  BackendOptions o;
  o.pjrt_plugin = cfg.train.pjrt_plugin;
  o.deterministic = cfg.train.deterministic;
  const ParallelConfig& p = cfg.parallel;
  for (const MeshAxis& a :
       {MeshAxis{"data", p.data}, MeshAxis{"fsdp", p.fsdp}, MeshAxis{"tensor", p.tensor}})
    if (a.size > 1) o.mesh.axes.push_back(a);
  o.devices = p.devices;
  o.sharding = plan_sharding;
  return o;
}

namespace {

struct JsonVisitor {
  nlohmann::json& out;
  template <class T>
  void operator()(const char* key, T& field, const char*, Choices = {}) {
    if (config_detail::omitted(field)) return;  // as config.yaml leaves it out
    out[key] = to_json(field);
  }
  template <class T>
  static nlohmann::json to_json(T& v) {
    if constexpr (config_detail::Visitable<T>) {
      nlohmann::json j = nlohmann::json::object();
      JsonVisitor sub{j};
      v.visit(sub);
      return j;
    } else if constexpr (config_detail::IsVector<T>::value) {
      nlohmann::json a = nlohmann::json::array();
      for (auto& e : v) a.push_back(to_json(e));
      return a;
    } else {
      return v;
    }
  }
};

}  // namespace

nlohmann::json run_config_to_json(RunConfig& cfg) {
  return JsonVisitor::to_json(cfg);
}

std::string run_config_to_yaml(RunConfig& cfg) {
  return config_to_yaml(cfg);
}

namespace {
// A name or an argument as one comment line: control characters (a newline) would end it.
std::string comment_text(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}
}  // namespace

std::string run_config_record(RunConfig& cfg) {
  std::string head;
  if (!cfg.config_file.empty()) {
    head =
        "# The resolved run config: every key, with the base_config files and --set arguments\n"
        "# below applied. It names no base_config itself and loads as it is.\n"
        "# config: " +
        comment_text(cfg.config_file) + "\n";
    if (!cfg.base_files.empty())
      head += "# base_config chain (applied in this order, then the config's own keys):\n";
    for (const std::string& b : cfg.base_files) head += "#   " + comment_text(b) + "\n";
    for (const std::string& o : cfg.overrides) head += "# --set " + comment_text(o) + "\n";
  }
  return head + run_config_to_yaml(cfg);
}

std::string run_config_hash(RunConfig& cfg) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char c : run_config_to_yaml(cfg)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

}  // namespace lmt
