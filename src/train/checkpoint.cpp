#include "train/checkpoint.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/json_depth.h"
#include "core/path_json.h"
#include "core/regular_file.h"
#include "core/remove_on_error.h"
#include "data/tokenizer/tokenizer.h"
#include "io/checkpoint_names.h"
#include "io/config_base.h"
#include "io/dir_checksums.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "train/model_builder.h"
#include "train/run_config.h"
#include "train/train_step.h"  // NonFiniteError

namespace lmt {

namespace fs = std::filesystem;

namespace {

const char* const kFiles[] = {"model.safetensors", "optimizer.safetensors", "config.json",
                              "config.yaml", "state.json"};
// A LoRA run's checkpoint: the adapters as PEFT saves them instead of the model's weights.
const char* const kLoraFiles[] = {"adapter_model.safetensors",
                                  "adapter_config.json",
                                  "optimizer.safetensors",
                                  "config.json",
                                  "config.yaml",
                                  "state.json"};

std::vector<std::string> checkpoint_files(bool lora) {
  if (lora) return {std::begin(kLoraFiles), std::end(kLoraFiles)};
  return {std::begin(kFiles), std::end(kFiles)};
}

// Flushes a file or directory to disk so that the rename that follows publishes complete data.
void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The trainable parameters (the adapters of a LoRA model, else all) on the host.
std::vector<uint8_t> flat_to_host(const Transformer& model) {
  std::vector<uint8_t> host(static_cast<size_t>(model.trainable_flat_size()) *
                            dtype_size(model.dtype()));
  model.backend()->to_host(host.data(), model.trainable_data(), host.size());
  return host;
}

std::vector<float> state_to_host(const Transformer& model, const StateBuffer& s) {
  std::vector<float> host(static_cast<size_t>(s.size));
  model.backend()->to_host(host.data(), s.data, host.size() * sizeof(float));
  return host;
}

// The name of the first parameter whose slice of a host copy of a flat buffer (f32 or f64) holds
// a value that is not finite; "" when all are finite. A checkpoint never holds such values: they
// would load and train on, and be copied into every later checkpoint.
std::string non_finite_param(const std::vector<ParamInfo>& params, const void* host, DType dt) {
  for (const ParamInfo& p : params) {
    bool bad = false;
    for (int64_t i = p.offset; i < p.offset + p.numel() && !bad; ++i)
      bad = dt == DType::f64 ? !std::isfinite(static_cast<const double*>(host)[i])
                             : !std::isfinite(static_cast<const float*>(host)[i]);
    if (bad) return p.name;
  }
  return "";
}

nlohmann::json read_json(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UserError("checkpoint: cannot read '" + path.string() + "'");
  auto j = parse_json_bounded(read_regular_file(path.string(), "checkpoint", kMaxConfigBytes),
                              path.string());
  if (j.is_discarded()) throw UserError("checkpoint: '" + path.string() + "' is not valid JSON");
  return j;
}

// A count in state.json (step, optimizer_step, tokens): a hand-edited or corrupt value is the
// user's to fix, not a failed check deep in the optimizer.
int64_t counter(const nlohmann::json& j, const char* field, const std::string& path) {
  if (!j.contains(field)) throw UserError(fmt::format("{}: field '{}' is missing", path, field));
  const nlohmann::json& v = j.at(field);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw UserError(fmt::format("{}: field '{}' must be a non-negative integer (got {})", path,
                                field, v.dump()));
  return v.get<int64_t>();
}

void load_into(const SafetensorsFile& file, const std::string& name, const ParamInfo& p, DType dt,
               Backend* be, void* base) {
  const SafetensorsMeta& meta = file.meta(name);
  if (meta.shape != p.shape)
    throw UserError(file.path() + ": tensor '" + name + "' has shape " + meta.shape.str() +
                    ", the model expects " + p.shape.str());
  HostTensor t = file.read_as(name, dt);
  be->from_host(static_cast<char*>(base) + static_cast<size_t>(p.offset) * dtype_size(dt), t.data(),
                t.nbytes());
}

}  // namespace

void remove_checkpoint_leftovers(const std::string& run_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path());
}

std::string save_checkpoint(const std::string& run_dir, const Transformer& model,
                            const std::vector<StateBuffer>& optimizer, const CheckpointState& state,
                            const std::string& config_yaml, int64_t keep_last) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  const std::string name = fmt::format("step_{:07d}", state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / fmt::format(".tmp-{}-{}", name, ::getpid());
  remove_checkpoint_leftovers(run_dir);
  fs::create_directories(tmp);
  RemoveOnError cleanup(tmp);  // a save that fails leaves no temporary directory behind

  const DType dt = model.dtype();
  std::vector<uint8_t> weights = flat_to_host(model);
  std::vector<std::vector<float>> host_state;
  for (const StateBuffer& s : optimizer) host_state.push_back(state_to_host(model, s));
  auto refuse = [&](const std::string& what, const std::vector<ParamInfo>& params, const void* host,
                    DType t) {
    if (const std::string bad = non_finite_param(params, host, t); !bad.empty())
      throw NonFiniteError(fmt::format(
          "step {}: the {} of {} is not finite; no checkpoint was written from this step",
          state.step, what, bad));
  };
  refuse("weight", model.trainable_params(), weights.data(), dt);
  for (size_t i = 0; i < optimizer.size(); ++i)
    refuse(fmt::format("{} state ({})", state.optimizer,
                       optimizer[i].prefix.substr(0, optimizer[i].prefix.size() - 1)),
           optimizer[i].params, host_state[i].data(), DType::f32);
  // Each file is hashed as soon as it is complete, while the next is written: the largest (the
  // optimizer's state) first, so that the hash left running when the writing ends is a smaller
  // one's.
  ChecksumRecorder checksums(tmp.string());
  SafetensorsWriter ow;
  for (size_t i = 0; i < optimizer.size(); ++i)
    for (const ParamInfo& p : optimizer[i].params)
      ow.add(optimizer[i].prefix + p.name, DType::f32, p.shape, host_state[i].data() + p.offset);
  ow.write((tmp / "optimizer.safetensors").string());
  checksums.add("optimizer.safetensors");
  if (model.has_lora()) {  // a PEFT adapter directory
    save_peft_adapter(tmp.string(), model, state.base_init_from, dt);
    checksums.add("adapter_model.safetensors");
    checksums.add("adapter_config.json");
  } else {
    SafetensorsWriter mw;
    mw.set_metadata("format", "pt");
    for (const ParamInfo& p : model.params())
      mw.add(p.name, dt, p.shape, weights.data() + static_cast<size_t>(p.offset) * dtype_size(dt));
    mw.write((tmp / "model.safetensors").string());
    checksums.add("model.safetensors");
  }

  write_text_file((tmp / "config.json").string(),
                  model_config_to_hf(model.config()).dump(2) + "\n");
  checksums.add("config.json");
  write_text_file((tmp / "config.yaml").string(), config_yaml);
  checksums.add("config.yaml");
  // The tokenizer travels with the weights (as in a Hugging Face model directory), so generation
  // and export need nothing but the checkpoint.
  if (const std::string tf = tokenizer_file(state.tokenizer); !tf.empty()) {
    // Under the name Hugging Face model directories use.
    const char* name = fs::path(tf).extension() == ".model" ? "tokenizer.model" : "tokenizer.json";
    std::error_code ec;
    fs::copy_file(tf, tmp / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw UserError("checkpoint: cannot copy the tokenizer '" + tf + "': " + ec.message());
    fsync_path(tmp / name);
    checksums.add(name);
  }
  nlohmann::json sj = {{"step", state.step},
                       {"optimizer_step", state.optimizer_step},
                       {"optimizer", state.optimizer},
                       {"tokens", state.tokens},
                       {"loader", state.loader},
                       {"config_hash", state.config_hash},
                       {"tokenizer", path_to_json(state.tokenizer)}};
  if (!state.data_fingerprint.empty())
    sj["data"] = {{"store", path_to_json(state.data_store)},
                  {"fingerprint", state.data_fingerprint},
                  {"tokenizer_fingerprint", state.tokenizer_fingerprint}};
  if (model.has_lora())
    sj["lora"] = {{"base_init_from", path_to_json(state.base_init_from)},
                  {"base_hash", state.base_hash}};
  if (!state.loss_watch.is_null()) sj["loss_watch"] = state.loss_watch;
  write_text_file((tmp / "state.json").string(), sj.dump(2) + "\n");
  checksums.add("state.json");
  // The flushes to disk come first: the hashes still running finish behind them.
  for (const std::string& f : checkpoint_files(model.has_lora())) fsync_path(tmp / f);
  checksums.write();  // last: marks the set complete (flushed)
  fsync_path(tmp);

  // A step_N already there (a run resumed from an older checkpoint) goes out of sight before it is
  // deleted, as in the pruning below.
  const fs::path replaced = root / fmt::format(".tmp-replaced-{}-{}", name, ::getpid());
  const bool replace = fs::exists(final_dir);
  if (replace) fs::rename(final_dir, replaced);
  fs::rename(tmp, final_dir);
  cleanup.disarm();
  fsync_path(root);
  if (replace) fs::remove_all(replaced);
  prune_checkpoints(run_dir, keep_last);
  return final_dir.string();
}

namespace {

fs::path protected_file(const std::string& run_dir) {
  return fs::path(run_dir) / "checkpoints" / "protected.json";
}

nlohmann::json read_protected(const std::string& run_dir) {
  const fs::path p = protected_file(run_dir);
  if (!fs::exists(p)) return nlohmann::json::object();
  auto j =
      parse_json_bounded(read_regular_file(p.string(), "checkpoints", kMaxConfigBytes), p.string());
  if (j.is_discarded() || !j.is_object())
    throw UserError(p.string() + ": not a JSON object (it lists the checkpoints pruning keeps)");
  return j;
}

}  // namespace

void protect_checkpoint(const std::string& run_dir, int64_t step, const std::string& why) {
  nlohmann::json j = read_protected(run_dir);
  j[fmt::format("step_{:07d}", step)] = why;
  fs::create_directories(protected_file(run_dir).parent_path());
  write_text_file(protected_file(run_dir).string(), j.dump(2) + "\n");
}

std::vector<int64_t> protected_checkpoints(const std::string& run_dir) {
  std::vector<int64_t> steps;
  const nlohmann::json listed = read_protected(run_dir);
  for (const auto& [name, why] : listed.items())
    if (const int64_t s = checkpoint_step(name); s >= 0) steps.push_back(s);
  return steps;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep_last) {
  if (keep_last <= 0) return;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const std::vector<int64_t> keep = protected_checkpoints(run_dir);
  auto all = checkpoint_dirs(root);  // newest first
  std::erase_if(all, [&](const auto& d) {
    return std::find(keep.begin(), keep.end(), d.first) != keep.end();
  });
  for (size_t i = static_cast<size_t>(keep_last); i < all.size(); ++i) {
    const int fd = ::open(all[i].second.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // a reader holds it
      ::close(fd);
      continue;
    }
    // Out of sight first: a kill inside remove_all would leave a step_N missing some files.
    const fs::path doomed =
        root / fmt::format(".tmp-deleted-{}-{}", all[i].second.filename().string(), ::getpid());
    fs::rename(all[i].second, doomed);
    fs::remove_all(doomed);
    if (fd >= 0) ::close(fd);
  }
}

bool CheckpointHold::take(const std::string& dir) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return false;
  ::flock(fd_, LOCK_SH);  // waits only while a prune renames and deletes it
  struct stat held {
  }, now{};
  return ::fstat(fd_, &held) == 0 && ::stat(dir.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
         held.st_dev == now.st_dev;
}

CheckpointHold::~CheckpointHold() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::string> hold_latest_checkpoint(const std::string& run_dir,
                                                  CheckpointHold& hold) {
  for (;;) {
    std::optional<std::string> latest = find_latest_checkpoint(run_dir);
    if (!latest || hold.take(*latest)) return latest;
  }
}

std::vector<std::string> set_aside_newer_checkpoints(const std::string& run_dir, int64_t step) {
  const fs::path root = fs::path(run_dir) / "checkpoints", aside = root / "abandoned";
  std::vector<std::string> moved;
  for (const auto& [s, d] : checkpoint_dirs(root)) {
    if (s <= step) continue;
    fs::create_directories(aside);
    fs::path to = aside / d.filename();
    for (int k = 2; fs::exists(to); ++k)  // an earlier set-aside of the same step
      to = aside / fmt::format("{}-{}", d.filename().string(), k);
    fs::rename(d, to);
    moved.push_back(d.filename().string());
  }
  fsync_path(root);
  std::reverse(moved.begin(), moved.end());
  return moved;
}

namespace {

// A step directory appears whole (it is renamed into place once complete), so a missing file or
// an unreadable state.json is damage: a UserError naming the checkpoint, the cause and the older
// checkpoints one can resume from instead.
void check_checkpoint_dir(const fs::path& dir, int64_t step) {
  auto damaged = [&](const std::string& cause) {
    std::string older;
    for (const auto& [s, d] : checkpoint_dirs(dir.parent_path()))
      if (s < step) older += (older.empty() ? "" : ", ") + d.filename().string();
    throw UserError("checkpoint '" + dir.string() + "' cannot be resumed: " + cause +
                    (older.empty()
                         ? "; no older checkpoint is there"
                         : "; to resume from an older one, pass --resume NAME (" + older + ")"));
  };
  // A LoRA run's checkpoint holds adapters instead of the model (state.json says so too).
  const bool lora =
      fs::exists(dir / "adapter_model.safetensors") || fs::exists(dir / "adapter_config.json");
  for (const std::string& f : checkpoint_files(lora))
    if (!fs::is_regular_file(dir / f)) damaged(f + " is missing");
  verify_checksums_quick(dir.string());  // the listing, the sizes and the small files
  const fs::path path = dir / "state.json";
  auto j = parse_json_bounded(read_regular_file(path.string(), "checkpoint", kMaxConfigBytes),
                              path.string());
  if (j.is_discarded()) damaged("state.json is not valid JSON");
  // A whole state.json that disagrees with its directory was edited or damaged.
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || j["step"] != step)
    throw UserError(fmt::format(
        "{}: field 'step' must be {}, the step of its directory (got {})", path.string(), step,
        j.is_object() && j.contains("step") ? j["step"].dump() : std::string("nothing")));
}

}  // namespace

std::string base_weights_hash(const Transformer& model) {
  const size_t total = static_cast<size_t>(model.flat_size()) * dtype_size(model.dtype());
  std::vector<uint8_t> chunk(std::min<size_t>(total, size_t{64} << 20));  // bounded host memory
  uint64_t h = 14695981039346656037ull;
  for (size_t at = 0; at < total; at += chunk.size()) {
    const size_t n = std::min(chunk.size(), total - at);
    model.backend()->to_host(chunk.data(), static_cast<const uint8_t*>(model.params_data()) + at,
                             n);
    for (size_t i = 0; i < n; ++i) h = (h ^ chunk[i]) * 1099511628211ull;
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

std::unique_ptr<Transformer> load_model_for_inference(const std::string& dir,
                                                      const std::string& adapter, Backend* be) {
  if (!is_lora_checkpoint(dir)) {
    std::unique_ptr<Transformer> model = load_hf_model(dir, be);
    if (!adapter.empty()) load_peft_adapter(adapter, *model);
    return model;
  }
  if (!adapter.empty())
    throw UserError("--adapter: '" + dir + "' is a LoRA checkpoint, which brings its own adapters");
  const nlohmann::json lora = read_json(fs::path(dir) / "state.json").at("lora");
  const std::string base =
      lora.contains("base_init_from")
          ? path_from_json(lora["base_init_from"], dir + "/state.json: lora.base_init_from")
          : std::string();
  const ModelConfig base_cfg = read_hf_model_config(dir);
  ModelWeights::check_fits(base_cfg, DType::f32, physical_memory_bytes());  // first
  auto model = std::make_unique<Transformer>(be, base_cfg);
  int64_t seed = TrainConfig{}.seed;  // the run's train.seed, for a base initialised from it
  if (base.empty()) {
    try {
      const std::string path = (fs::path(dir) / "config.yaml").string();
      const YAML::Node train = load_yaml_file(path, path, "checkpoint config")["train"];
      if (train && train["seed"]) seed = train["seed"].as<int64_t>();
    } catch (const YAML::Exception& e) {
      throw UserError(dir + "/config.yaml: " + e.what());
    }
  }
  init_base_weights(*model, base, seed);  // as the run did
  const std::string hash = base_weights_hash(*model);
  if (hash != lora.value("base_hash", std::string()))
    throw UserError(fmt::format(
        "{}: the base model ({}) is not the one these adapters were trained on: its weights hash "
        "to {}, the checkpoint recorded {}",
        dir, base.empty() ? "initialised from train.seed" : base, hash,
        lora.value("base_hash", std::string())));
  load_peft_adapter(dir, *model);
  return model;
}

std::optional<std::string> find_latest_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root)) return std::nullopt;
  const auto dirs = checkpoint_dirs(root);
  if (dirs.empty()) return std::nullopt;
  check_checkpoint_dir(dirs.front().second, dirs.front().first);
  return dirs.front().second.string();
}

std::string find_checkpoint(const std::string& run_dir, const std::string& name) {
  fs::path dir = fs::path(run_dir) / "checkpoints" / name;
  if (!fs::is_directory(dir) && fs::is_directory(name)) dir = name;  // a path given as it is
  const int64_t step = checkpoint_step(dir);
  if (!fs::is_directory(dir) || step < 0) {
    std::string have;
    for (const auto& [s, d] : checkpoint_dirs(fs::path(run_dir) / "checkpoints"))
      have += (have.empty() ? "" : ", ") + d.filename().string();
    throw UserError("--resume " + name + ": no checkpoint of that name in '" +
                    (fs::path(run_dir) / "checkpoints").string() + "'" +
                    (have.empty() ? " (it has none)" : " (it has " + have + ")"));
  }
  check_checkpoint_dir(dir, step);
  return dir.string();
}

bool is_lora_checkpoint(const std::string& dir) {
  const fs::path state = fs::path(dir) / "state.json";
  return fs::exists(fs::path(dir) / "adapter_config.json") && fs::exists(state) &&
         read_json(state).contains("lora");
}

namespace {

// state.json's optimizer (adamw in checkpoints written before it was recorded).
std::string saved_optimizer(const nlohmann::json& j) {
  return j.contains("optimizer") && j["optimizer"].is_string() ? j["optimizer"].get<std::string>()
                                                               : std::string("adamw");
}

CheckpointState state_from_json(const nlohmann::json& j, const std::string& dir,
                                const std::string& path) {
  CheckpointState s;
  try {
    s.step = counter(j, "step", path);
    s.optimizer_step = counter(j, "optimizer_step", path);
    s.optimizer = saved_optimizer(j);
    s.tokens = j.contains("tokens") ? counter(j, "tokens", path) : 0;
    s.loader = j.at("loader");
    s.config_hash = j.value("config_hash", std::string());
    s.tokenizer = j.contains("tokenizer") ? path_from_json(j["tokenizer"], path + ": tokenizer")
                                          : std::string();
    if (j.contains("data")) {
      const nlohmann::json& d = j.at("data");
      s.data_store = path_from_json(d.at("store"), path + ": data.store");
      s.data_fingerprint = d.at("fingerprint").get<std::string>();
      s.tokenizer_fingerprint = d.at("tokenizer_fingerprint").get<std::string>();
    }
    if (j.contains("lora")) {
      s.lora = true;
      s.base_init_from =
          path_from_json(j.at("lora").at("base_init_from"), path + ": lora.base_init_from");
      s.base_hash = j.at("lora").at("base_hash").get<std::string>();
    }
    if (j.contains("loss_watch")) s.loss_watch = j.at("loss_watch");
  } catch (const nlohmann::json::exception& e) {
    throw UserError(dir + "/state.json: " + e.what());
  }
  return s;
}

// The first parameter of a host copy of an optimizer's f32 state buffer holding a negative value,
// "" when none: a second moment (AdamW's exp_avg_sq, Muon's for its AdamW part) is a mean of
// squares, and a negative one makes the next step's square root NaN far from the cause.
std::string negative_param(const std::vector<ParamInfo>& params, const float* host) {
  for (const ParamInfo& p : params)
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i)
      if (host[i] < 0) return p.name;
  return "";
}

CheckpointState load_checkpoint_files(const std::string& dir, Transformer& model,
                                      const std::vector<StateBuffer>& optimizer,
                                      const std::string& optimizer_name) {
  const std::string path = (fs::path(dir) / "state.json").string();
  const nlohmann::json j = read_json(path);
  const bool lora_checkpoint = j.contains("lora");
  if (lora_checkpoint != model.has_lora())
    throw UserError(dir +
                    (lora_checkpoint
                         ? " holds LoRA adapters, and this run has no lora section (lora.rank "
                           "is 0)"
                         : " holds a whole model, and this run trains LoRA adapters "
                           "(lora.rank > 0)"));
  if (model.has_lora()) {
    load_peft_adapter_weights(dir, model);
  } else {
    load_hf_weights_unverified(dir, model);  // a checkpoint is a Hugging Face directory
  }
  const std::string saved = saved_optimizer(j);
  if (!optimizer.empty() && saved != optimizer_name)
    throw UserError(dir + " holds the state of optimizer " + saved +
                    ", and this run's optimizer.name is " + optimizer_name +
                    " (resume with the same optimizer, or start a new run from its weights with "
                    "train.init_from)");
  if (!optimizer.empty()) {
    const std::string opt_path = (fs::path(dir) / "optimizer.safetensors").string();
    SafetensorsFile st = SafetensorsFile::open(opt_path);
    for (const StateBuffer& s : optimizer)
      for (const ParamInfo& p : s.params) {
        const std::string name = s.prefix + p.name;
        if (!st.contains(name))
          throw UserError(opt_path + ": tensor '" + name + "' is missing (the checkpoint holds " +
                          saved + "'s state)");
        load_into(st, name, p, DType::f32, model.backend(), s.data);
      }
  }
  auto refuse = [&](const std::string& what, const std::string& param) {
    if (!param.empty())
      throw UserError(dir + ": the " + what + " of " + param +
                      " is not finite; a checkpoint with non-finite values cannot be resumed");
  };
  refuse("weight",
         non_finite_param(model.trainable_params(), flat_to_host(model).data(), model.dtype()));
  for (const StateBuffer& s : optimizer) {
    const std::vector<float> host = state_to_host(model, s);
    const std::string what = "optimizer state " + s.prefix.substr(0, s.prefix.size() - 1);
    refuse(what, non_finite_param(s.params, host.data(), DType::f32));
    if (s.prefix == "exp_avg_sq.")
      if (const std::string bad = negative_param(s.params, host.data()); !bad.empty())
        throw UserError(dir + "/optimizer.safetensors: the " + what + " of " + bad +
                        " holds a negative value; a second moment is a mean of squares, so the "
                        "file is damaged");
  }
  return state_from_json(j, dir, path);
}

}  // namespace

CheckpointState load_checkpoint(const std::string& dir, Transformer& model,
                                const std::vector<StateBuffer>& optimizer,
                                const std::string& optimizer_name) {
  CheckpointState s;
  load_verified(dir, [&] { s = load_checkpoint_files(dir, model, optimizer, optimizer_name); });
  return s;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  return state_from_json(read_json(path), dir, path);
}

CheckpointState load_checkpoint_unverified(const std::string& dir, Transformer& model,
                                           const std::vector<StateBuffer>& optimizer,
                                           const std::string& optimizer_name) {
  return load_checkpoint_files(dir, model, optimizer, optimizer_name);
}

}  // namespace lmt
