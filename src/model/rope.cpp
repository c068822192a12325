#include "model/rope.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace lmt {

namespace {

template <class T>
void require(bool ok, const char* key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("model.{} must be {} (got {})", key, rule, got));
}

// transformers: 1 / theta^(2i / d), computed in float32.
std::vector<double> default_inv_freq(double theta, int64_t D) {
  std::vector<double> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    inv[i] = 1.0f / std::pow(static_cast<float>(theta),
                             static_cast<float>(2 * i) / static_cast<float>(D));
  return inv;
}

int64_t original_max(const ModelConfig& c) {
  return c.rope_original_max_position_embeddings > 0 ? c.rope_original_max_position_embeddings
                                                     : c.max_position_embeddings;
}

}  // namespace

void validate_rope(const ModelConfig& c) {
  require(c.rope_theta > 0, "rope_theta", "> 0", c.rope_theta);
  if (c.rope_type != "default" && c.rope_type != "linear" && c.rope_type != "llama3")
    throw UserError("model.rope_type '" + c.rope_type +
                    "' is not supported (supported: default, linear, llama3)");
  require(c.rope_factor > 0, "rope_factor", "> 0", c.rope_factor);
  require(c.rope_original_max_position_embeddings >= 0, "rope_original_max_position_embeddings",
          ">= 0 (0 = max_position_embeddings)", c.rope_original_max_position_embeddings);
  require(c.rope_local_base_freq >= 0, "rope_local_base_freq", ">= 0 (0 = rope_theta)",
          c.rope_local_base_freq);
  if (c.rope_type == "llama3")
    require(c.rope_high_freq_factor > c.rope_low_freq_factor && c.rope_low_freq_factor > 0,
            "rope_high_freq_factor", "> model.rope_low_freq_factor > 0", c.rope_high_freq_factor);
}

bool rope_depends_on_length(const ModelConfig& c) {
  return c.rope_type == "dynamic";
}

RopeFrequencies rope_frequencies(const ModelConfig& c, bool local, int64_t /*seq_len*/) {
  const int64_t D = c.head_size();
  RopeFrequencies r;
  if (local && c.rope_local_base_freq > 0) {
    r.inv_freq = default_inv_freq(c.rope_local_base_freq, D);
    return r;
  }
  r.inv_freq = default_inv_freq(c.rope_theta, D);
  if (c.rope_type == "linear") {
    for (double& f : r.inv_freq) f /= c.rope_factor;
  } else if (c.rope_type == "llama3") {
    // _compute_llama3_parameters: long wavelengths are divided by factor, short ones kept, and the
    // band between is interpolated smoothly.
    const double old_len = static_cast<double>(original_max(c));
    const double low_wavelen = old_len / c.rope_low_freq_factor;
    const double high_wavelen = old_len / c.rope_high_freq_factor;
    for (double& f : r.inv_freq) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / c.rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - c.rope_low_freq_factor) /
                              (c.rope_high_freq_factor - c.rope_low_freq_factor);
        f = (1 - smooth) * f / c.rope_factor + smooth * f;
      }
    }
  }
  return r;
}

}  // namespace lmt
