// PEFT adapter directories: reading and writing adapter_config.json and adapter_model.safetensors,
// and folding adapters into the base.
#include "io/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/regular_file.h"
#include "io/dir_checksums.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// The base weights of a model and its adapters on the host as f64.
std::vector<double> to_host_f64(const Transformer& model, const void* data, int64_t n) {
  std::vector<uint8_t> raw(static_cast<size_t>(n) * dtype_size(model.dtype()));
  model.backend()->to_host(raw.data(), data, raw.size());
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = load_element(model.dtype(), raw.data(), i);
  return out;
}

}  // namespace

nlohmann::json peft_adapter_config(const Transformer& model, const std::string& base) {
  const LoraSpec& s = model.lora_spec();
  // The modules adapted, by their paths inside a block ("self_attn.q_proj", "attn.c_proj"), which
  // PEFT matches as suffixes: a bare "c_proj" would also adapt gpt2's mlp.c_proj. Every layer has
  // the same adapters, so layer 0's name them all.
  std::vector<std::string> modules;
  for (const LoraTarget& t : model.lora_targets())
    if (t.layer == 0) modules.push_back(t.module.path);
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base},
          {"r", s.rank},
          {"lora_alpha", s.alpha},
          {"lora_dropout", s.dropout},
          {"target_modules", modules},
          {"use_rslora", s.use_rslora},
          {"fan_in_fan_out", model.config().traits().conv1d},
          {"bias", "none"},
          {"modules_to_save",
           s.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.modules_to_save)},
          {"init_lora_weights", true},
          {"inference_mode", true}};
}

LoraSpec read_peft_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw UserError("adapter: '" + path + "' not found (not a PEFT adapter directory)");
  const auto j = parse_json_bounded(read_regular_file(path, "adapter", kMaxConfigBytes), path);
  if (!j.is_object()) throw UserError(path + ": not a JSON object");
  auto field = [&](const char* name) -> const nlohmann::json& {
    static const nlohmann::json null;
    auto it = j.find(name);
    return it == j.end() ? null : *it;
  };
  auto refuse = [&](const std::string& what) { throw UserError(path + ": " + what); };
  if (field("peft_type") != "LORA")
    refuse("peft_type is " + field("peft_type").dump() + "; lmtrain reads LORA adapters");
  LoraSpec s;
  if (!field("r").is_number_integer()) refuse("field 'r' must be an integer");
  s.rank = field("r").get<int64_t>();
  if (!field("lora_alpha").is_number()) refuse("field 'lora_alpha' must be a number");
  s.alpha = field("lora_alpha").get<double>();
  const nlohmann::json& tm = field("target_modules");
  if (tm.is_string())
    refuse("target_modules is a regular expression (" + excerpt(tm.get<std::string>()) +
           "); lmtrain reads adapters whose target_modules is a list of module names");
  if (!tm.is_array()) refuse("field 'target_modules' must be a list of module names");
  s.target_modules.clear();  // the config's default is all-linear; the file's list replaces it
  for (const auto& t : tm) {
    if (!t.is_string()) refuse("target_modules holds " + t.dump() + ", not a module name");
    s.target_modules.push_back(t.get<std::string>());
  }
  s.use_rslora = field("use_rslora").is_boolean() && field("use_rslora").get<bool>();
  if (field("lora_dropout").is_number()) s.dropout = field("lora_dropout").get<double>();
  if (!(s.dropout >= 0 && s.dropout < 1))
    refuse("lora_dropout is " + field("lora_dropout").dump() + "; it must be in [0, 1)");
  if (!field("bias").is_null() && field("bias") != "none")
    refuse("bias is " + field("bias").dump() + "; lmtrain's adapters train no biases (none)");
  const nlohmann::json& mts = field("modules_to_save");
  if (!mts.is_null() && !mts.is_array()) refuse("field 'modules_to_save' must be a list or null");
  for (const auto& m : mts.is_array() ? mts : nlohmann::json::array()) {
    if (!m.is_string()) refuse("modules_to_save holds " + excerpt(m.dump()) + ", not a name");
    s.modules_to_save.push_back(m.get<std::string>());
  }
  for (const char* unsupported :
       {"use_dora", "layers_to_transform", "rank_pattern", "alpha_pattern"}) {
    const nlohmann::json& v = field(unsupported);
    if (!v.is_null() && v != false && !(v.is_object() && v.empty()) && !(v.is_array() && v.empty()))
      refuse(std::string(unsupported) + " is " + excerpt(v.dump()) +
             "; lmtrain reads plain LoRA adapters without it");
  }
  return s;
}

namespace {

// The rank adapter_config.json gives against the adapter tensors' own (a header read), before
// add_lora sizes buffers by it.
void check_rank_of_tensors(const std::string& dir, const LoraSpec& spec) {
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  const SafetensorsFile st = SafetensorsFile::open(path);
  for (const std::string& name : st.names()) {
    if (!name.ends_with(".lora_A.weight")) continue;
    const Shape& shape = st.meta(name).shape;
    if (shape.dims().size() != 2 || shape[0] != spec.rank)
      throw UserError((fs::path(dir) / "adapter_config.json").string() + ": r is " +
                      std::to_string(spec.rank) + " but " + path + " holds '" + name +
                      "' of shape " + shape.str() + " (rank first)");
  }
}

}  // namespace

void load_peft_adapter(const std::string& dir, Transformer& model) {
  load_verified(dir, [&] {
    const LoraSpec spec = read_peft_adapter_config(dir);
    try {
      lora_layout(model.config(), spec);  // the rank and modules against the model's shape
    } catch (const UserError& e) {
      throw UserError((fs::path(dir) / "adapter_config.json").string() + ": " + e.what());
    }
    check_rank_of_tensors(dir, spec);  // and against the tensors, before add_lora sizes by it
    try {
      model.add_lora(spec, 0);
    } catch (const UserError& e) {
      throw UserError((fs::path(dir) / "adapter_config.json").string() + ": " + e.what());
    }
    load_peft_adapter_weights(dir, model);
  });
}

void load_peft_adapter_weights(const std::string& dir, Transformer& model) {
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  SafetensorsFile st = SafetensorsFile::open(path);
  for (const ParamInfo& p : model.lora_params()) {
    if (!st.contains(p.name))
      throw UserError(path + ": tensor '" + p.name +
                      "' is missing (the adapter was made for other target modules or "
                      "modules_to_save)");
    if (st.meta(p.name).shape != p.shape)
      throw UserError(path + ": tensor '" + p.name + "' has shape " + st.meta(p.name).shape.str() +
                      ", the model expects " + p.shape.str() +
                      " (an adapter made for another base model?)");
    HostTensor t = st.read_as(p.name, model.dtype());
    model.backend()->from_host(static_cast<char*>(model.lora_data()) +
                                   static_cast<size_t>(p.offset) * dtype_size(model.dtype()),
                               t.data(), t.nbytes());
  }
  // A tensor the model has no place for would be lost without a word.
  for (const std::string& name : st.names()) {
    const auto& ps = model.lora_params();
    if (std::none_of(ps.begin(), ps.end(), [&](const ParamInfo& p) { return p.name == name; }))
      throw UserError(path + ": tensor '" + name +
                      "' is not one this model's adapters have (the adapter was made for other "
                      "target modules or modules_to_save)");
  }
}

void save_peft_adapter(const std::string& dir, const Transformer& model, const std::string& base,
                       DType dtype) {
  const std::vector<double> w = to_host_f64(model, model.lora_data(), model.lora_flat_size());
  SafetensorsWriter out;
  out.set_metadata("format", "pt");
  for (const ParamInfo& p : model.lora_params()) {
    HostTensor t(dtype, p.shape);
    for (int64_t i = 0; i < p.numel(); ++i) store_element(dtype, t.data(), i, w[p.offset + i]);
    out.add_copy(p.name, t);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create '" + dir + "': " + ec.message());
  out.write((fs::path(dir) / "adapter_model.safetensors").string());
  write_text_file((fs::path(dir) / "adapter_config.json").string(),
                  peft_adapter_config(model, base)
                          .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                      "\n");  // PEFT reads the base's name as text: a non-UTF-8 byte becomes U+FFFD
}

void merge_lora_into_base(Transformer& model) {
  const bool conv1d = model.config().traits().conv1d;
  std::vector<double> base = to_host_f64(model, model.params_data(), model.flat_size());
  const std::vector<double> lw = to_host_f64(model, model.lora_data(), model.lora_flat_size());
  const LoraSpec& spec = model.lora_spec();
  const double s = spec.scaling();
  const int64_t r = spec.rank;
  for (const LoraTarget& t : model.lora_targets()) {
    const ParamInfo& a = model.lora_params()[static_cast<size_t>(t.a)];
    const ParamInfo& b = model.lora_params()[static_cast<size_t>(t.b)];
    const ParamInfo& w =
        model.param(block_prefix(model.config(), t.layer) + t.module.path + ".weight");
    const int64_t in = t.module.in, out = t.module.out;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double d = 0;
        for (int64_t k = 0; k < r; ++k) d += lw[b.offset + o * r + k] * lw[a.offset + k * in + i];
        // Hugging Face stores Linear weights [out, in] and gpt2's Conv1D weights [in, out].
        base[w.offset + (conv1d ? i * out + o : o * in + i)] += s * d;
      }
  }
  for (const SavedParam& sp : model.lora_saved()) {  // trained copies replace the base's
    const ParamInfo& copy = model.lora_params()[static_cast<size_t>(sp.index)];
    const ParamInfo& w = model.param(sp.base_name);
    std::copy_n(lw.begin() + copy.offset, copy.numel(), base.begin() + w.offset);
  }
  std::vector<uint8_t> raw(base.size() * dtype_size(model.dtype()));
  for (size_t i = 0; i < base.size(); ++i)
    store_element(model.dtype(), raw.data(), static_cast<int64_t>(i), base[i]);
  model.backend()->from_host(model.params_data(), raw.data(), raw.size());
}

}  // namespace lmt
