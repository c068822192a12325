// RoPE frequencies for every rope_type, following transformers 5's modeling_rope_utils.py
// operation by operation: its tensors are float32, so each tensor step is one float32 operation
// here (in the same order; `x / t` on a tensor is reciprocal(t) * x there), and its Python scalar
// steps (correction range, attention factor, wavelength bounds) are doubles. The build is ISO
// C++ (no GNU extensions), so the compiler does not fuse these steps into FMAs. torch's vectorised
// pow may differ from libm's by an ulp, which bounds how far these values can be from its own.
#include "model/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lmt {

namespace {

template <class T>
void require(bool ok, const char* key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("model.{} must be {} (got {})", key, rule, got));
}

// base ** (arange(0, D, 2).float() / D), elementwise in float32.
float pos_freq(float base, int64_t i, int64_t D) {
  return std::pow(base, static_cast<float>(2 * i) / static_cast<float>(D));
}

std::vector<float> default_inv_freq(float base, int64_t D) {
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) inv[i] = 1.0f / pos_freq(base, i, D);
  return inv;
}

// _compute_dynamic_ntk_parameters with seq_len a tensor (dynamic_rope_update's largest
// position + 1), so the new base is computed in float32 too.
std::vector<float> dynamic_inv_freq(const ModelConfig& c, int64_t seq_len) {
  const int64_t D = c.head_size();
  const int64_t M = c.max_position_embeddings;
  if (seq_len <= M) return default_inv_freq(static_cast<float>(c.rope_theta), D);
  float s = static_cast<float>(c.rope_factor) * static_cast<float>(seq_len);
  s = s / static_cast<float>(M);
  s = s - static_cast<float>(c.rope_factor - 1.0);
  // A float32 0-d tensor to a Python float's power: torch takes the power in double and rounds
  // once (checked against torch 2.x on 20000 random cases; powf with the exponent rounded to float
  // differs by an ulp in most of them).
  const auto grow = static_cast<float>(
      std::pow(static_cast<double>(s), static_cast<double>(D) / static_cast<double>(D - 2)));
  const float base = static_cast<float>(c.rope_theta) * grow;
  return default_inv_freq(base, D);
}

// _compute_llama3_parameters.
std::vector<float> llama3_inv_freq(const ModelConfig& c) {
  const int64_t D = c.head_size();
  std::vector<float> inv = default_inv_freq(static_cast<float>(c.rope_theta), D);
  const double old_len = static_cast<double>(rope_original_max(c));
  const float low_wavelen = static_cast<float>(old_len / c.rope_low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / c.rope_high_freq_factor);
  const float factor = static_cast<float>(c.rope_factor);
  const float two_pi = static_cast<float>(2 * M_PI);
  const float low = static_cast<float>(c.rope_low_freq_factor);
  const float band = static_cast<float>(c.rope_high_freq_factor - c.rope_low_freq_factor);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = ((1.0f / wavelen) * static_cast<float>(old_len) - low) / band;
      const float a = (1.0f - smooth) * scaled / factor;
      const float b = smooth * scaled;
      f = a + b;
    } else {
      f = scaled;
    }
  }
  return inv;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// _compute_yarn_parameters.
RopeFrequencies yarn(const ModelConfig& c) {
  const int64_t D = c.head_size();
  const double factor = c.rope_factor;
  const double base = c.rope_theta;
  RopeFrequencies r;
  if (c.rope_attention_factor > 0)
    r.attention_factor = c.rope_attention_factor;
  else if (c.rope_mscale != 0 && c.rope_mscale_all_dim != 0)
    r.attention_factor =
        yarn_mscale(factor, c.rope_mscale) / yarn_mscale(factor, c.rope_mscale_all_dim);
  else
    r.attention_factor = yarn_mscale(factor, 1.0);

  // The dimensions whose wavelength makes beta_fast (beta_slow) turns over the original context.
  const double orig = static_cast<double>(rope_original_max(c));
  auto correction_dim = [&](double rotations) {
    return (D * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(c.rope_beta_fast);
  double high = correction_dim(c.rope_beta_slow);
  if (c.rope_truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(D - 1));  // D - 1 (not D / 2 - 1), as transformers
  if (low == high) high += 0.001;
  const float lo = static_cast<float>(low);
  const float span = static_cast<float>(high - low);

  r.inv_freq.resize(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i) {
    const float p = pos_freq(static_cast<float>(base), i, D);
    const float extrapolation = 1.0f / p;
    const float interpolation = 1.0f / (static_cast<float>(factor) * p);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // share of the unscaled (extrapolated) frequency
    const float a = interpolation * (1.0f - keep);
    const float b = extrapolation * keep;
    r.inv_freq[i] = a + b;
  }
  return r;
}

std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

int64_t rope_original_max(const ModelConfig& c) {
  return c.rope_original_max_position_embeddings > 0 ? c.rope_original_max_position_embeddings
                                                     : c.max_position_embeddings;
}

void validate_rope(const ModelConfig& c) {
  const std::string& t = c.rope_type;
  if (!one_of(t, kRopeTypes))
    throw UserError("model.rope_type '" + t +
                    "' is not supported (supported: " + choices_text(kRopeTypes) + ")");
  require(c.rope_theta > 0, "rope_theta", "> 0", c.rope_theta);
  require(c.rope_factor > 0, "rope_factor", "> 0", c.rope_factor);
  if (t == "default" && c.rope_factor != 1.0)
    throw UserError(fmt::format(
        "model.rope_factor is {} but model.rope_type is default, which does not scale: set "
        "model.rope_type (linear, dynamic, llama3 or yarn) or leave model.rope_factor at 1",
        c.rope_factor));
  require(c.rope_original_max_position_embeddings >= 0, "rope_original_max_position_embeddings",
          ">= 0 (0 = max_position_embeddings)", c.rope_original_max_position_embeddings);
  if (t == "dynamic" && c.rope_original_max_position_embeddings != 0)
    throw UserError(fmt::format(
        "model.rope_original_max_position_embeddings ({}) does not apply to rope_type dynamic, "
        "which scales from model.max_position_embeddings as transformers does: leave it 0",
        c.rope_original_max_position_embeddings));
  if (t == "llama3") {
    require(c.rope_low_freq_factor > 0, "rope_low_freq_factor", "> 0", c.rope_low_freq_factor);
    if (!(c.rope_high_freq_factor > c.rope_low_freq_factor))
      throw UserError(fmt::format(
          "model.rope_high_freq_factor ({}) must be greater than model.rope_low_freq_factor ({})",
          c.rope_high_freq_factor, c.rope_low_freq_factor));
  }
  if (t == "yarn") {
    require(c.rope_attention_factor >= 0, "rope_attention_factor", ">= 0 (0 = derived)",
            c.rope_attention_factor);
    require(c.rope_beta_slow > 0, "rope_beta_slow", "> 0", c.rope_beta_slow);
    if (!(c.rope_beta_fast > c.rope_beta_slow))
      throw UserError(
          fmt::format("model.rope_beta_fast ({}) must be greater than model.rope_beta_slow ({})",
                      c.rope_beta_fast, c.rope_beta_slow));
    require(c.rope_mscale >= 0, "rope_mscale", ">= 0 (0 = unset)", c.rope_mscale);
    require(c.rope_mscale_all_dim >= 0, "rope_mscale_all_dim", ">= 0 (0 = unset)",
            c.rope_mscale_all_dim);
  }
  require(c.rope_local_base_freq >= 0, "rope_local_base_freq",
          ">= 0 (0 = rope_theta with the scaling)", c.rope_local_base_freq);
  if (c.rope_local_base_freq > 0 && c.family != "gemma3")
    throw UserError(fmt::format(
        "model.rope_local_base_freq ({}) is only used by family gemma3 (this model is {}): "
        "leave it 0",
        c.rope_local_base_freq, c.family));
}

bool rope_depends_on_length(const ModelConfig& c) {
  return c.rope_type == "dynamic";
}

RopeFrequencies rope_frequencies(const ModelConfig& c, bool local, int64_t seq_len) {
  const int64_t D = c.head_size();
  if (local && c.rope_local_base_freq > 0)
    return {widen(default_inv_freq(static_cast<float>(c.rope_local_base_freq), D)), 1.0};
  if (c.rope_type == "yarn") return yarn(c);
  if (c.rope_type == "dynamic") return {widen(dynamic_inv_freq(c, seq_len)), 1.0};
  if (c.rope_type == "llama3") return {widen(llama3_inv_freq(c)), 1.0};
  std::vector<float> inv = default_inv_freq(static_cast<float>(c.rope_theta), D);
  if (c.rope_type == "linear")
    for (float& f : inv) f = f / static_cast<float>(c.rope_factor);
  return {widen(inv), 1.0};
}

}  // namespace lmt
