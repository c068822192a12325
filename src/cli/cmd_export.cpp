// `lmtrain export`: a checkpoint (or a run's newest one, or any Hugging Face directory: to change
// its dtype or sharding) as a Hugging Face model directory. The weights are read as
// load_hf_model reads them (open_hf_weights), but mapped, not loaded: f32 tensors go to
// save_hf_model as pointers into the mappings, so memory holds the mapped model plus one shard
// being converted (plus f32 copies of tensors stored in other dtypes).
#include <fmt/core.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/output_lock.h"
#include "core/remove_on_error.h"
#include "data/chat_template.h"
#include "data/tokenizer/tokenizer.h"
#include "io/config_base.h"
#include "io/dir_checksums.h"
#include "io/gguf_export.h"
#include "io/hf_export.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

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

// The chat template the export's tokenizer_config.json carries, with a note for the user: a
// checkpoint's run config (config.yaml) names the template its chat / instruction data were
// rendered with (data.sources[].chat_template), written as Jinja (ChatTemplate::jinja); a Hugging
// Face directory keeps the chat_template of its own tokenizer_config.json. None where the sources
// disagree or have no chat data.
std::string export_chat_template(const fs::path& dir, std::string& note) {
  if (!fs::exists(dir / "config.yaml")) {
    if (!fs::exists(dir / "tokenizer_config.json")) return "";
    std::ifstream in(dir / "tokenizer_config.json");
    const auto tc = nlohmann::json::parse(in, nullptr, false);
    if (!tc.is_object()) return "";
    auto it = tc.find("chat_template");
    if (it == tc.end() || !it->is_string()) return "";
    note = "the chat template of its tokenizer_config.json";
    return it->get<std::string>();
  }
  // Only data.sources is read, with SourceConfig's defaults: a checkpoint's config need not be a
  // whole valid run config for its weights to export.
  std::string jinja, setting, key;
  try {
    const std::string path = (dir / "config.yaml").string();
    const YAML::Node sources = load_yaml_file(path, path, "checkpoint config")["data"]["sources"];
    for (size_t i = 0; sources && sources.IsSequence() && i < sources.size(); ++i) {
      const YAML::Node s = sources[i];
      if (!s.IsMap()) continue;
      const SourceConfig defaults;
      const std::string schema = s["schema"] ? s["schema"].as<std::string>() : defaults.schema;
      if (schema != "chat" && schema != "instruction") continue;
      const std::string t =
          s["chat_template"] ? s["chat_template"].as<std::string>() : defaults.chat_template;
      const std::string k = "data.sources[" + std::to_string(i) + "].chat_template";
      // Instruction records render through the template's instruction style (plain's differs).
      const std::string j = ChatTemplate::from_setting(t, k).jinja(schema == "instruction");
      if (!key.empty() && j != jinja) {
        note = "no chat template: " + key + " and " + k + " render chats differently";
        return "";
      }
      if (key.empty()) std::tie(jinja, setting, key) = std::tie(j, t, k);
    }
  } catch (const YAML::Exception& e) {
    note = "no chat template: cannot read " + (dir / "config.yaml").string() + ": " + e.what();
    return "";
  }
  if (key.empty()) return "";
  note = "the chat template '" + setting + "' (" + key + ")";
  return jinja;
}

// The export carries dir's tokenizer file, if any, and then the chat template of
// export_chat_template; returns its note.
std::string add_tokenizer(const fs::path& dir, HfExportOptions& opt) {
  if (const std::string f = tokenizer_file(dir.string()); fs::exists(f)) opt.tokenizer = f;
  std::string note;
  if (!opt.tokenizer.empty()) opt.chat_template = export_chat_template(dir, note);
  return note;
}

}  // namespace

fs::path resolve_model_dir(const std::string& arg, const char* flag, CheckpointHold& hold) {
  const fs::path dir = arg;
  if (!fs::exists(dir)) throw UserError(std::string(flag) + ": '" + arg + "' does not exist");
  if (fs::exists(dir / "config.json")) {
    hold.take(arg);  // a checkpoint of a run that may be pruning
    return dir;
  }
  auto latest = hold_latest_checkpoint(arg, hold);
  if (!latest)
    throw UserError(std::string(flag) + ": '" + arg +
                    "' is neither a checkpoint (no config.json) nor a run with checkpoints");
  return *latest;
}

namespace {

// A PEFT adapter directory at `out`, written under out.tmp-PID and renamed into place (replacing a
// previous adapter directory there), holding the output's lock.
void write_adapter_dir(const std::string& out, const Transformer& model, const std::string& base,
                       DType dtype) {
  const fs::path final_dir = fs::path(out).lexically_normal();
  std::error_code ec;
  if (fs::exists(final_dir, ec) && !fs::is_empty(final_dir, ec) &&
      !fs::exists(final_dir / "adapter_config.json"))
    throw UserError("export: '" + out +
                    "' exists and is not empty (only a previous adapter directory is replaced); "
                    "choose another --out or remove it");
  const OutputLock lock = lock_output_path(final_dir.string(), "--out");
  remove_dead_writers_leftovers(final_dir);
  const fs::path tmp = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  RemoveOnError cleanup(tmp);
  save_peft_adapter(tmp.string(), model, base, dtype);
  ChecksumRecorder checksums(tmp.string());
  checksums.add("adapter_model.safetensors");
  checksums.add("adapter_config.json");
  checksums.write();
  const fs::path old = final_dir.string() + ".old-" + std::to_string(::getpid());
  const bool replace = fs::exists(final_dir, ec);
  if (replace) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  cleanup.disarm();
  if (replace) fs::remove_all(old, ec);
}

// A LoRA checkpoint as a PEFT adapter directory, or (merge) any model with its adapters folded in
// as a plain Hugging Face directory.
template <class Opts>
int export_lora(const Opts& o, const fs::path& dir, HfExportOptions opt, bool lora_checkpoint) {
  auto be = make_backend("cpu");
  std::unique_ptr<Transformer> model = load_model_for_inference(dir.string(), o.adapter, be.get());
  if (!model->has_lora())
    throw UserError("--merge: '" + dir.string() + "' has no LoRA adapters (give --adapter DIR)");
  if (!o.merge) {
    std::string base;
    if (std::ifstream in(dir / "adapter_config.json"); in) {
      const auto j = nlohmann::json::parse(in, nullptr, false);
      if (j.is_object()) base = j.value("base_model_name_or_path", std::string());
    }
    write_adapter_dir(o.out, *model, base, opt.dtype);
    fmt::print("exported the LoRA adapters of {} to {} as a PEFT adapter directory ({} tensors, "
               "{}; base: {})\n",
               dir.string(), o.out, model->lora_params().size(), dtype_name(opt.dtype),
               base.empty() ? "initialised from train.seed, export it with --merge" : base);
    return 0;
  }
  merge_lora_into_base(*model);
  const std::string template_note = add_tokenizer(dir, opt);
  const HfExportResult r = save_hf_model(o.out, *model, opt);
  fmt::print("exported {} with its LoRA adapters merged{} to {}: {} {} weights in {} file{}\n",
             dir.string(), lora_checkpoint ? "" : " (" + o.adapter + ")", r.dir,
             format_bytes(r.tensor_bytes), dtype_name(opt.dtype), r.shards,
             r.shards == 1 ? "" : "s");
  if (!template_note.empty()) fmt::print("tokenizer_config.json: {}\n", template_note);
  return 0;
}

// --format gguf: the model (a LoRA one with its adapters merged) as one GGUF file.
template <class Opts>
int export_gguf(const Opts& o) {
  if (!o.out.empty() && o.out.back() == '/')
    throw UserError("--out '" + o.out +
                    "' ends with '/', a directory's name: --format gguf writes one file (give "
                    "its name, as model.gguf)");
  GgufExportOptions opt;
  opt.type = o.dtype.empty() ? GgufType::bf16 : parse_gguf_type(o.dtype, "--dtype");
  CheckpointHold hold;
  const fs::path dir = resolve_model_dir(o.checkpoint, "--checkpoint", hold);
  if (!o.adapter.empty() && !o.merge)
    throw UserError("--adapter: give --merge too (a PEFT adapter exports as it is)");
  HfExportOptions hf;
  const std::string template_note = add_tokenizer(dir, hf);
  opt.tokenizer = hf.tokenizer;
  opt.chat_template = hf.chat_template;
  opt.name = fs::path(o.out).stem().string();
  // What the tensors point into: the merged model's parameters, or the directory's mapped files.
  std::vector<float> storage;
  std::vector<HostTensor> owned;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Transformer> model;
  std::optional<HfWeights> weights;
  ModelConfig cfg;
  std::vector<HfTensor> tensors;
  const bool merged = is_lora_checkpoint(dir.string()) || o.merge;
  if (merged) {
    be = make_backend("cpu");
    model = load_model_for_inference(dir.string(), o.adapter, be.get());
    if (model->has_lora()) merge_lora_into_base(*model);
    cfg = model->config();
    tensors = model_hf_tensors(*model, storage);
  } else {
    verify_checksums(dir.string());  // before a byte of it is exported
    cfg = read_hf_model_config(dir.string());
    weights.emplace(open_hf_weights(dir.string(), cfg));
    tensors = source_tensors(*weights, owned);
  }
  const GgufExportResult r = save_gguf(o.out, cfg, tensors, opt);
  for (const std::string& w : r.warnings) fmt::print(stderr, "export: warning: {}\n", w);
  fmt::print("exported {}{} to {}: {} tensors, {} ({}), with {}\n", dir.string(),
             merged ? " with its LoRA adapters merged" : "", r.path, r.tensors,
             format_bytes(r.bytes), gguf_type_name(opt.type),
             fs::path(opt.tokenizer).filename().string());
  if (!template_note.empty()) fmt::print("tokenizer.chat_template: {}\n", template_note);
  return 0;
}

}  // namespace

Run add_export(CLI::App& app) {
  struct Opts {
    std::string checkpoint, adapter, out, dtype, max_shard = "5GB", format = "hf";
    bool merge = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--checkpoint", o->checkpoint,
                 "checkpoint directory (checkpoints/step_NNNNNNN), a run directory (its newest), "
                 "or a Hugging Face model directory")
      ->required();
  app.add_option("--out", o->out,
                 "the Hugging Face model directory to write (--format gguf: the .gguf file)")
      ->required();
  app.add_option("--format", o->format,
                 "hf: a Hugging Face model directory; gguf: one GGUF file for llama.cpp")
      ->capture_default_str();
  app.add_option("--dtype", o->dtype,
                 "weights as bf16, f16 or f32, or q8_0 with --format gguf (default: bf16 for a "
                 "model; f32, the dtype they train in, for a PEFT adapter, as PEFT saves one)");
  app.add_option("--max-shard-size", o->max_shard,
                 "split the weights into shards of at most this size (500MB, 5GB, bytes)")
      ->capture_default_str();
  app.add_flag("--merge", o->merge,
               "LoRA: fold the adapters into the base and write a plain Hugging Face model "
               "(without it, a LoRA checkpoint exports as a PEFT adapter directory)");
  app.add_option("--adapter", o->adapter,
                 "with --merge: a PEFT adapter directory to fold into the --checkpoint model");
  return [o]() {
    if (o->format != "hf" && o->format != "gguf")
      throw UserError("--format: '" + o->format + "' is not a format (expected hf or gguf)");
    if (o->format == "gguf") return export_gguf(*o);
    HfExportOptions opt;
    const std::optional<DType> dtype =
        o->dtype.empty() ? std::nullopt
                         : std::optional<DType>(parse_export_dtype(o->dtype, "--dtype"));
    opt.max_shard_bytes = parse_byte_size(o->max_shard, "--max-shard-size");
    CheckpointHold hold;
    const fs::path dir = resolve_model_dir(o->checkpoint, "--checkpoint", hold);
    const bool lora_checkpoint = is_lora_checkpoint(dir.string());
    const bool adapter_only = lora_checkpoint && !o->merge;
    opt.dtype = dtype.value_or(adapter_only ? DType::f32 : DType::bf16);
    if (!o->adapter.empty() && !o->merge)
      throw UserError("--adapter: give --merge too (a PEFT adapter exports as it is)");
    if (lora_checkpoint || o->merge) return export_lora(*o, dir, opt, lora_checkpoint);
    verify_checksums(dir.string());  // before a byte of it is exported
    const ModelConfig cfg = read_hf_model_config(dir.string());
    const HfWeights weights = open_hf_weights(dir.string(), cfg);
    std::vector<HostTensor> owned;
    const std::vector<HfTensor> tensors = source_tensors(weights, owned);
    const std::string template_note = add_tokenizer(dir, opt);
    const HfExportResult r = save_hf_model(o->out, cfg, tensors, opt);
    fmt::print("exported {} to {}: {} {} weights in {} file{}{}\n", dir.string(), r.dir,
               format_bytes(r.tensor_bytes), dtype_name(opt.dtype), r.shards,
               r.shards == 1 ? "" : "s",
               opt.tokenizer.empty() ? " (no tokenizer files: the checkpoint has none)"
                                     : ", with " + fs::path(opt.tokenizer).filename().string());
    if (!template_note.empty()) fmt::print("tokenizer_config.json: {}\n", template_note);
    return 0;
  };
}

}  // namespace lmt::cli
