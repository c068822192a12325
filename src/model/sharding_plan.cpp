// The sharding plan's table (see sharding_plan.h). Names match by their end, so a parameter, its
// gradient, its optimizer moments and PEFT's "base_model.model.<name>" copies share one entry.
#include "model/sharding_plan.h"

#include <array>

namespace lmt {
namespace {

using Axes = std::vector<std::string>;
const Axes kNone = {}, kFsdp = {"fsdp"}, kTensor = {"tensor"}, kBatch = {"data", "fsdp"};

// A linear module, by the end of its name: the axes of its output and input features, and whether
// its weight is stored [in, out] (gpt2's Conv1D) rather than [out, in].
struct Module {
  const char* suffix;
  const Axes* out;
  const Axes* in;
  bool conv1d;
};
constexpr std::array<Module, 13> kModules = {{
    {".q_proj", &kTensor, &kFsdp, false},
    {".k_proj", &kTensor, &kFsdp, false},
    {".v_proj", &kTensor, &kFsdp, false},
    {".gate_proj", &kTensor, &kFsdp, false},
    {".up_proj", &kTensor, &kFsdp, false},
    {".o_proj", &kFsdp, &kTensor, false},
    {".down_proj", &kFsdp, &kTensor, false},
    {".c_attn", &kTensor, &kFsdp, true},
    {".c_fc", &kTensor, &kFsdp, true},
    {"attn.c_proj", &kFsdp, &kTensor, true},
    {"mlp.c_proj", &kFsdp, &kTensor, true},
    {"lm_head", &kTensor, &kFsdp, false},
    {"embed_tokens", &kTensor, &kFsdp, false},
}};

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

TensorSharding plan_sharding(const std::string& name, const std::vector<int64_t>& dims) {
  // The batch's arrays [sequences, positions] and the activations [rows, features] the model
  // names at a layer's boundary (Backend::keep: "activation.residual"): rows over the batch axes.
  if ((name.rfind("batch.", 0) == 0 || name.rfind("activation.", 0) == 0) && dims.size() == 2)
    return {kBatch, kNone};
  if (ends_with(name, "wte.weight") && dims.size() == 2) return {kTensor, kFsdp};
  if (ends_with(name, "wpe.weight") && dims.size() == 2) return {kNone, kFsdp};
  for (const Module& m : kModules) {
    const std::string base = m.suffix;
    if (ends_with(name, base + ".weight") && dims.size() == 2)
      return m.conv1d ? TensorSharding{*m.in, *m.out} : TensorSharding{*m.out, *m.in};
    if (ends_with(name, base + ".bias") && dims.size() == 1) return {*m.out};
    if (ends_with(name, base + ".lora_A.weight") && dims.size() == 2) return {kNone, *m.in};
    if (ends_with(name, base + ".lora_B.weight") && dims.size() == 2) return {*m.out, kNone};
  }
  return {};
}

}  // namespace lmt
