// Loading, validating, saving and hashing a RunConfig. Loading reads the file into a YAML tree,
// applies --set overrides to the tree (so an override is checked exactly like a file key), fills
// the structs through config_yaml.h and validates; every failure is one UserError naming the file.
#include "train/run_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "core/regular_file.h"
#include "io/config_base.h"
#include "io/config_yaml.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "model/rope.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"
#include "train/checkpoint.h"

namespace lmt {

namespace {

template <class T>
void require(bool ok, const std::string& key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("{} must be {} (got {})", key, rule, got));
}

void require_one_of(const std::string& key, const std::string& v,
                    std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return;
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  throw UserError(fmt::format("{} must be one of {} (got '{}')", key, list, excerpt(v)));
}

// YAML's .inf and .nan read as numbers, and a range test such as `lr > 0` lets infinity through:
// every number of a section is checked finite first, naming its key.
struct RequireFinite {
  std::string section;
  template <class T>
  void operator()(const char* name, const T& field, const char*) const {
    if constexpr (std::is_floating_point_v<T>)
      require(std::isfinite(field), section + "." + name, "a finite number", field);
  }
};

template <class Section>
void require_finite(Section s, const std::string& section) {
  RequireFinite check{section};
  s.visit(check);
}

void validate_data(const DataConfig& d, const ModelConfig& m) {
  require(d.seq_len >= 1, "data.seq_len", ">= 1", d.seq_len);
  if (d.seq_len > m.max_position_embeddings)
    throw UserError(fmt::format("data.seq_len ({}) must be <= model.max_position_embeddings ({})",
                                d.seq_len, m.max_position_embeddings));
  if (d.tokenizer.empty()) throw UserError("data.tokenizer must not be empty");
  if (d.tokenizer == "bytes" && m.vocab_size < 257)
    throw UserError(
        fmt::format("model.vocab_size ({}) must be >= 257 for data.tokenizer 'bytes' "
                    "(256 byte ids + end-of-text)",
                    m.vocab_size));
  require(d.val_fraction >= 0 && d.val_fraction <= 0.5, "data.val_fraction", "in [0, 0.5]",
          d.val_fraction);
  require_one_of("data.packing", d.packing, {"auto", "continue", "bin"});
  if (d.sources.empty() && d.store.empty())
    throw UserError(
        "data.sources must list at least one source (or data.store name a prepared "
        "token store)");
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const SourceConfig& s = d.sources[i];
    const std::string at = "data.sources[" + std::to_string(i) + "].";
    if (s.path.empty()) throw UserError(at + "path must not be empty");
    for (size_t j = 0; j < i && !s.name.empty(); ++j)
      if (d.sources[j].name == s.name)
        throw UserError(at + "name '" + s.name + "' is also data.sources[" + std::to_string(j) +
                        "]'s (names must differ)");
    require_one_of(at + "format", s.format, {"text", "jsonl", "csv", "tsv", "parquet"});
    require_one_of(at + "schema", s.schema, {"text", "instruction", "chat"});
    require_one_of(at + "loss", s.loss, {"assistant", "all"});
    require_one_of(at + "on_error", s.on_error, {"stop", "skip"});
    if (s.format != "text" && s.field.empty()) throw UserError(at + "field must not be empty");
    require_one_of(at + "split", s.split, {"file", "line", "delimiter"});
    if (s.split == "delimiter" && s.delimiter.empty())
      throw UserError(at + "delimiter must not be empty when split is 'delimiter'");
    require(std::isfinite(s.weight), at + "weight", "a finite number", s.weight);
    require(s.weight > 0, at + "weight", "> 0", s.weight);
  }
}

void validate_train(const TrainConfig& t) {
  require_finite(t, "train");
  require_one_of("train.backend", t.backend, {"cpu", "pjrt", "cuda", "auto"});
  if (!t.pjrt_plugin.empty() && t.backend != "pjrt")
    throw UserError("train.pjrt_plugin is set, but train.backend is '" + t.backend +
                    "' (the plugin is used with backend pjrt)");
  require_one_of("train.precision", t.precision, {"f32", "bf16"});
  if (t.deterministic && t.backend != "pjrt")
    throw UserError("train.deterministic is set, but train.backend is '" + t.backend +
                    "' (it asks XLA for deterministic ops; the CPU backend always is)");
  require(t.activation_bits == 0 || t.activation_bits == 1, "train.activation_bits",
          "0 or 1 (0 = the pre-activation kept whole)", t.activation_bits);
  require(t.micro_batch_size >= 1, "train.micro_batch_size", ">= 1", t.micro_batch_size);
  require(t.grad_accum_steps >= 1, "train.grad_accum_steps", ">= 1", t.grad_accum_steps);
  require(t.max_steps > 0, "train.max_steps", "> 0", t.max_steps);
  require(t.lr > 0, "train.lr", "> 0", t.lr);
  require(t.min_lr >= 0, "train.min_lr", ">= 0", t.min_lr);
  if (t.min_lr > t.lr)
    throw UserError(fmt::format("train.min_lr ({}) must be <= train.lr ({})", t.min_lr, t.lr));
  require(t.warmup_steps >= 0, "train.warmup_steps", ">= 0", t.warmup_steps);
  require_one_of("train.schedule", t.schedule, {"constant", "cosine", "linear", "wsd"});
  require(t.decay_fraction >= 0 && t.decay_fraction <= 1, "train.decay_fraction", "in [0, 1]",
          t.decay_fraction);
  require(t.weight_decay >= 0, "train.weight_decay", ">= 0", t.weight_decay);
  require(t.grad_clip >= 0, "train.grad_clip", ">= 0 (0 = off)", t.grad_clip);
  require(t.peak_tflops >= 0, "train.peak_tflops", ">= 0 (0 = known or measured)", t.peak_tflops);
  require(t.eval_every >= 0, "train.eval_every", ">= 0 (0 = never)", t.eval_every);
  require(t.eval_steps >= 1 || t.eval_every == 0, "train.eval_steps", ">= 1 when eval_every > 0",
          t.eval_steps);
  require(t.save_every >= 0, "train.save_every", ">= 0 (0 = only at the end)", t.save_every);
  require(t.keep_last >= 0, "train.keep_last", ">= 0 (0 = all)", t.keep_last);
  require(t.log_every >= 1, "train.log_every", ">= 1", t.log_every);
  if (t.out_dir.empty()) throw UserError("train.out_dir must not be empty");
  require(t.loss_chunk_tokens >= 1, "train.loss_chunk_tokens", ">= 1", t.loss_chunk_tokens);
  require(t.threads >= 0, "train.threads", ">= 0 (0 = all cores)", t.threads);
  require(t.sample_tokens >= 0, "train.sample_tokens", ">= 0", t.sample_tokens);
}

// Every axis divides what the sharding plan splits over it, one message naming the key and both
// numbers.
void validate_parallel(const ParallelConfig& p, const TrainConfig& t, const ModelConfig& m) {
  require(p.data >= 1, "parallel.data", ">= 1", p.data);
  require(p.fsdp >= 1, "parallel.fsdp", ">= 1", p.fsdp);
  require(p.tensor >= 1, "parallel.tensor", ">= 1", p.tensor);
  require(p.coordination_timeout >= 1, "parallel.coordination_timeout", ">= 1 (seconds)",
          p.coordination_timeout);
  if (!p.devices.empty() && static_cast<int64_t>(p.devices.size()) != p.size())
    throw UserError(fmt::format(
        "parallel.devices names {} devices, but the mesh data {} x fsdp {} x tensor {} has {}",
        p.devices.size(), p.data, p.fsdp, p.tensor, p.size()));
  for (size_t i = 0; i < p.devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (p.devices[i] == p.devices[j])
        throw UserError(fmt::format("parallel.devices names device {} twice", p.devices[i]));
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

void validate_optimizer(const OptimizerConfig& o) {
  require_finite(o, "optimizer");
  require_one_of("optimizer.name", o.name, {"adamw", "lion", "sgd", "muon"});
  require(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1", "in [0, 1)", o.beta1);
  require(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2", "in [0, 1)", o.beta2);
  require(o.eps > 0, "optimizer.eps", "> 0", o.eps);
  require(o.momentum >= 0 && o.momentum < 1, "optimizer.momentum", "in [0, 1)", o.momentum);
  require(o.ns_steps >= 1 && o.ns_steps <= 100, "optimizer.ns_steps", "in [1, 100]", o.ns_steps);
}

// Every model key's value as text (fmt's shortest round-trip form for numbers, so equal text is
// an equal value); resolved: the keys with an "unset" spelling (0 = derived) as they resolve.
struct CollectValues {
  std::map<std::string, std::string>& out;
  template <class T>
  void operator()(const char* name, T& field, const char*) {
    out[name] = fmt::format("{}", field);
  }
};

std::map<std::string, std::string> model_values(ModelConfig c, bool resolved) {
  if (resolved) {
    c.num_key_value_heads = c.kv_heads();
    c.head_dim = c.head_size();
    if (c.rope_type == "llama3" || c.rope_type == "yarn")
      c.rope_original_max_position_embeddings = rope_original_max(c);
  }
  std::map<std::string, std::string> out;
  CollectValues v{out};
  c.visit(v);
  return out;
}

// The address of every model field by key, to copy chosen keys from one config to another.
using FieldPtr = std::variant<std::string*, int64_t*, double*, bool*>;
struct CollectFields {
  std::map<std::string, FieldPtr>& out;
  template <class T>
  void operator()(const char* name, T& field, const char*) {
    out[name] = &field;
  }
};

// `to` with the `keys` of `from`: the user's keys over the directory's config, so that a key
// written as 0 ("derived") resolves against the shape the run will really have.
ModelConfig overlay(const ModelConfig& from, ModelConfig to, const std::vector<std::string>& keys) {
  ModelConfig src = from;
  std::map<std::string, FieldPtr> a, b;
  CollectFields ca{a}, cb{b};
  src.visit(ca);
  to.visit(cb);
  for (const std::string& k : keys) {
    if (!a.count(k)) continue;
    std::visit([&](auto* p) { *std::get<std::remove_reference_t<decltype(p)>>(b.at(k)) = *p; },
               a.at(k));
  }
  return to;
}

}  // namespace

void apply_init_from(RunConfig& cfg, const std::vector<std::string>& set_model_keys,
                     bool tokenizer_set, const std::string& where) {
  if (cfg.train.init_from.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir = cfg.train.init_from;
  // A run that has checkpoints resumes without the directory (it may be gone): the newest
  // checkpoint holds the same config.json and a copy of the tokenizer.
  if (!fs::is_directory(dir, ec))
    if (auto ckpt = find_latest_checkpoint(cfg.train.out_dir)) dir = *ckpt;
  if (!fs::is_directory(dir, ec))
    throw UserError(fmt::format(
        "{}: train.init_from '{}' is not a directory (it must be a Hugging Face model directory "
        "holding config.json and model.safetensors)",
        where, dir));
  ModelConfig hf;
  try {
    hf = read_hf_model_config(dir);
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: train.init_from: {}", where, e.what()));
  }
  const auto raw = model_values(cfg.model, false);
  const auto mine = model_values(overlay(cfg.model, hf, set_model_keys), true);
  const auto theirs = model_values(hf, true);
  for (const std::string& key : set_model_keys) {
    auto a = mine.find(key), b = theirs.find(key);
    if (a == mine.end() || b == theirs.end() || a->second == b->second) continue;
    const std::string given =
        raw.at(key) == a->second ? a->second : fmt::format("{} (= {})", raw.at(key), a->second);
    throw UserError(fmt::format(
        "{}: model.{} is {} here but {} in {}: train.init_from takes the model's shape from "
        "that config.json, so leave model.{} out or make it agree",
        where, key, given, b->second, (fs::path(dir) / "config.json").string(), key));
  }
  cfg.model = hf;
  if (!tokenizer_set || cfg.data.tokenizer.empty()) {
    if (fs::exists(fs::path(dir) / "tokenizer.json") ||
        fs::exists(fs::path(dir) / "tokenizer.model"))
      cfg.data.tokenizer = dir;
    else if (cfg.data.tokenizer.empty())
      throw UserError(fmt::format(
          "{}: data.tokenizer is empty and train.init_from '{}' holds neither tokenizer.json nor "
          "tokenizer.model: name the tokenizer in data.tokenizer",
          where, dir));
  }
}

std::vector<std::string> model_key_names() {
  std::vector<std::string> names;
  for (const auto& [name, value] : model_values(ModelConfig{}, false)) names.push_back(name);
  return names;
}

LoraSpec lora_spec(const LoraConfig& c) {
  LoraSpec s;
  s.rank = c.rank;
  s.alpha = c.alpha;
  s.target_modules = c.target_modules;
  s.use_rslora = c.use_rslora;
  s.dropout = c.dropout;
  s.modules_to_save = c.modules_to_save;
  return s;
}

void apply_lora_init_from(RunConfig& cfg) {
  LoraConfig& l = cfg.lora;
  if (l.init_from.empty()) return;
  const LoraSpec a = read_peft_adapter_config(l.init_from);
  const std::string where = "lora.init_from '" + l.init_from + "'";
  if (l.rank == 0) {
    l.rank = a.rank;
    l.alpha = a.alpha;
    l.use_rslora = a.use_rslora;
    l.dropout = a.dropout;
    l.target_modules = a.target_modules;
    l.modules_to_save = a.modules_to_save;
    return;
  }
  auto differ = [&](const std::string& key, const std::string& ours, const std::string& theirs) {
    throw UserError(
        fmt::format("lora.{} is {} here but {} in {} (leave lora.rank at 0 to take "
                    "the adapter's settings)",
                    key, ours, theirs, where));
  };
  if (l.rank != a.rank) differ("rank", std::to_string(l.rank), std::to_string(a.rank));
  if (l.alpha != a.alpha) differ("alpha", fmt::format("{}", l.alpha), fmt::format("{}", a.alpha));
  if (l.use_rslora != a.use_rslora)
    differ("use_rslora", l.use_rslora ? "true" : "false", a.use_rslora ? "true" : "false");
  // The same projections and saved modules, whatever the spelling ("q_proj" or
  // "self_attn.q_proj").
  auto adapted = [&](const LoraSpec& s, bool saved) {
    const LoraLayout layout = lora_layout(cfg.model, s);
    std::vector<std::string> names;
    if (saved)
      for (const SavedParam& p : layout.saved) names.push_back(p.base_name);
    else
      for (const LoraTarget& t : layout.targets)
        names.push_back(layout.params[static_cast<size_t>(t.a)].name);
    return names;
  };
  if (adapted(lora_spec(l), false) != adapted(a, false))
    differ("target_modules", fmt::format("[{}]", fmt::join(l.target_modules, ", ")),
           fmt::format("[{}]", fmt::join(a.target_modules, ", ")));
  if (adapted(lora_spec(l), true) != adapted(a, true))
    differ("modules_to_save", fmt::format("[{}]", fmt::join(l.modules_to_save, ", ")),
           fmt::format("[{}]", fmt::join(a.modules_to_save, ", ")));
}

namespace {

void validate_loss(const LossConfig& l, const LoraConfig& lora) {
  require_finite(l, "loss");
  require_one_of("loss.name", l.name, {"cross_entropy", "focal"});
  require(l.label_smoothing >= 0 && l.label_smoothing < 1, "loss.label_smoothing", "in [0, 1)",
          l.label_smoothing);
  require(l.z_loss >= 0, "loss.z_loss", ">= 0 (0 = off)", l.z_loss);
  require(l.focal_gamma > 0 && l.focal_gamma <= 100, "loss.focal_gamma", "in (0, 100]",
          l.focal_gamma);
  if (l.name != "focal" && l.focal_gamma != LossConfig().focal_gamma)
    throw UserError(fmt::format(
        "loss.focal_gamma is {}, but loss.name is '{}' (the focal factor applies with loss.name: "
        "focal)",
        l.focal_gamma, l.name));
  require_one_of("loss.impl", l.impl, {"chunked", "cut"});
  require(l.vocab_tile >= 1, "loss.vocab_tile", ">= 1", l.vocab_tile);
  if (l.impl == "cut" && lora.base_dtype == "bf16")
    throw UserError(
        "loss.impl: cut needs the output head in the model's dtype, and lora.base_dtype: bf16 "
        "holds it in bf16 (use loss.impl: chunked, or lora.base_dtype: f32)");
}

void validate_wandb(const WandbConfig& w) {
  if (!w.enabled()) return;
  if (w.project.empty())
    throw UserError(
        "logging.wandb.project is required when logging.wandb is given (the W&B project the run "
        "is filed under)");
  // W&B refuses these in project names and run ids.
  for (const auto& [key, v] :
       {std::pair{"logging.wandb.project", &w.project}, std::pair{"logging.wandb.id", &w.id}})
    if (v->find_first_of("/\\#?%:") != std::string::npos)
      throw UserError(
          fmt::format("{} must not hold any of / \\ # ? % : (got '{}')", key, excerpt(*v)));
  for (size_t i = 0; i < w.tags.size(); ++i)
    if (w.tags[i].empty()) throw UserError(fmt::format("logging.wandb.tags[{}] is empty", i));
}

}  // namespace

void RunConfig::validate() const {
  model.validate();
  validate_data(data, model);
  validate_train(train);
  validate_loss(loss, lora);
  validate_optimizer(optimizer);
  validate_wandb(logging.wandb);
  validate_parallel(parallel, train, model);
  require_finite(lora, "lora");
  require(lora.rank >= 0, "lora.rank", ">= 0 (0 = full training)", lora.rank);
  require(lora.dropout >= 0 && lora.dropout < 1, "lora.dropout", "in [0, 1)", lora.dropout);
  require_one_of("lora.base_dtype", lora.base_dtype, {"f32", "bf16"});
  if (lora.base_dtype != "f32" && lora.rank == 0)
    throw UserError("lora.base_dtype: " + lora.base_dtype +
                    " keeps a frozen base; it needs lora.rank > 0 (a model that trains in full "
                    "keeps f32 weights)");
  if (lora.base_dtype == "bf16" && train.precision == "bf16")
    throw UserError(
        "lora.base_dtype: bf16 holds the frozen base in bf16 for f32 compute; with "
        "train.precision: bf16 the base is computed with in bf16 already (leave lora.base_dtype "
        "at f32)");
  if (optimizer.name == "muon" && lora.rank > 0)
    throw UserError(
        "optimizer.name: muon orthogonalises the updates of hidden weight matrices, and a LoRA run "
        "trains adapters of rank lora.rank instead (use adamw, lion or sgd with lora)");
  if (lora.rank > 0) lora_layout(model, lora_spec(lora));  // names and sizes, one message
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
  const YAML::Node model = tree["model"] && tree["model"].IsMap() ? tree["model"] : YAML::Node();
  // model.family picks the defaults of the keys the file leaves out (gemma2's soft-caps and window
  // pattern, gpt2's activation, ...); an unknown family is reported by validate() below.
  if (model && model["family"] && model["family"].IsScalar()) {
    try {
      cfg.model = family_defaults(model["family"].as<std::string>());
    } catch (const UserError&) {
    }
  }
  read_config(root, cfg, src);
  // An empty logging.wandb section asks for a W&B run as much as a full one (config.yaml's
  // resolved section, every key empty, does not: it lists the defaults).
  const YAML::Node logging =
      tree["logging"] && tree["logging"].IsMap() ? tree["logging"] : YAML::Node();
  if (logging && logging["wandb"] && (logging["wandb"].IsNull() || logging["wandb"].size() == 0) &&
      cfg.logging.wandb.project.empty())
    throw UserError(path +
                    ": logging.wandb.project is required when logging.wandb is given (the W&B "
                    "project the run is filed under)");
  // The optimizer's defaults that depend on optimizer.name, for the keys the file leaves out.
  const YAML::Node opt =
      tree["optimizer"] && tree["optimizer"].IsMap() ? tree["optimizer"] : YAML::Node();
  auto given = [&](const char* key) { return opt && opt[key]; };
  if (cfg.optimizer.name == "lion" && !given("beta2")) cfg.optimizer.beta2 = 0.99;
  if (cfg.optimizer.name == "muon" && !given("momentum")) cfg.optimizer.momentum = 0.95;
  if (cfg.optimizer.name == "muon" && !given("nesterov")) cfg.optimizer.nesterov = true;
  std::vector<std::string> model_keys;  // the model keys the file and the overrides give
  if (model)
    for (const auto& kv : model) model_keys.push_back(kv.first.as<std::string>());
  derive_unset_keys(cfg.model, model_keys);
  if (!cfg.train.init_from.empty()) {
    const bool tokenizer_set = tree["data"] && tree["data"].IsMap() && tree["data"]["tokenizer"];
    apply_init_from(cfg, model_keys, tokenizer_set, path);
  }
  try {
    apply_lora_init_from(cfg);
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

OptimizerSpec optimizer_spec(const RunConfig& cfg) {
  const OptimizerConfig& o = cfg.optimizer;
  OptimizerSpec s;
  s.name = o.name;
  s.beta1 = o.beta1, s.beta2 = o.beta2, s.eps = o.eps;
  s.momentum = o.momentum, s.nesterov = o.nesterov, s.ns_steps = o.ns_steps;
  s.weight_decay = cfg.train.weight_decay;
  s.decay_embeddings = o.decay_embeddings, s.decay_norms_and_biases = o.decay_norms_and_biases;
  return s;
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
  o.coordination_dir = p.coordination_dir.empty()
                           ? (std::filesystem::path(cfg.train.out_dir) / "coordination").string()
                           : p.coordination_dir;
  o.coordination_timeout = p.coordination_timeout;
  o.sharding = plan_sharding;
  return o;
}

namespace {

struct JsonVisitor {
  nlohmann::json& out;
  template <class T>
  void operator()(const char* key, T& field, const char*) {
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
