// Importing train.init_from (a Hugging Face model directory: the model section, the tokenizer) and
// lora.init_from (a PEFT adapter directory: the lora section) into a RunConfig; see init_from.h.
// The model keys a config gives are compared with the directory's resolved, as the run would have
// them (0 = derived keys taken against the directory's shape).
#include "train/init_from.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <variant>

#include "core/error.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "model/lora.h"
#include "model/rope.h"
#include "train/checkpoint.h"

namespace lmt {

namespace {

// Every model key's value as text (fmt's shortest round-trip form for numbers, so equal text is
// an equal value); resolved: the keys with an "unset" spelling (0 = derived) as they resolve.
struct CollectValues {
  std::map<std::string, std::string>& out;
  template <class T>
  void operator()(const char* name, T& field, const char*, Choices = {}) {
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
  void operator()(const char* name, T& field, const char*, Choices = {}) {
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

// Every model key's name (ModelConfig::visit).
std::vector<std::string> model_key_names() {
  std::vector<std::string> names;
  for (const auto& [name, value] : model_values(ModelConfig{}, false)) names.push_back(name);
  return names;
}

}  // namespace

void import_init_from(RunConfig& cfg, const std::vector<std::string>& given_model_keys,
                      bool tokenizer_given, const std::string& where) {
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
  const auto mine = model_values(overlay(cfg.model, hf, given_model_keys), true);
  const auto theirs = model_values(hf, true);
  for (const std::string& key : given_model_keys) {
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
  if (!tokenizer_given || cfg.data.tokenizer.empty()) {
    if (fs::exists(fs::path(dir) / "tokenizer.json") ||
        fs::exists(fs::path(dir) / "tokenizer.model"))
      cfg.data.tokenizer = dir;
    else if (cfg.data.tokenizer.empty())
      throw UserError(fmt::format(
          "{}: data.tokenizer is empty and train.init_from '{}' holds neither tokenizer.json nor "
          "tokenizer.model: name the tokenizer in data.tokenizer",
          where, dir));
  }
  cfg.imported_init_from = cfg.train.init_from;
}

void import_init_from(RunConfig& cfg) {
  import_init_from(cfg, model_key_names(), true, "train");
}

void import_lora_init_from(RunConfig& cfg) {
  LoraSpec& l = cfg.lora;
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
  if (adapted(l, false) != adapted(a, false))
    differ("target_modules", fmt::format("[{}]", fmt::join(l.target_modules, ", ")),
           fmt::format("[{}]", fmt::join(a.target_modules, ", ")));
  if (adapted(l, true) != adapted(a, true))
    differ("modules_to_save", fmt::format("[{}]", fmt::join(l.modules_to_save, ", ")),
           fmt::format("[{}]", fmt::join(a.modules_to_save, ", ")));
}

}  // namespace lmt
