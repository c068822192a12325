// RoPE scaling: every rope_type's frequencies against values derived here, in double, from the
// formulas (written in wavelength / rotation terms where transformers works in dimension terms,
// and with the YaRN correction ranges and llama3 bands of published configs worked out by hand),
// the reductions each type must obey, config.json round trips through read_hf_rope /
// write_hf_rope, and every bad-input message. Values are float32 in transformers, so
// comparisons allow a few float32 ulps (2e-6 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../io/io_test_util.h"
#include "io/hf_rope.h"
#include "model/rope.h"

namespace lmt {
namespace {

using nlohmann::json;
constexpr double kRel = 2e-6;

ModelConfig head(int64_t D, double theta) {
  ModelConfig c;
  c.hidden_size = D * 4;
  c.num_attention_heads = 4;
  c.rope_theta = theta;
  return c;
}

double plain(double theta, int64_t i, int64_t D) {
  return std::pow(theta, -2.0 * i / D);
}

void expect_rel(const std::vector<double>& got, const std::vector<double>& want,
                const std::string& what, double rel = kRel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i])) << what << " dim " << i;
}

std::vector<double> defaults(double theta, int64_t D) {
  std::vector<double> v;
  for (int64_t i = 0; i < D / 2; ++i) v.push_back(plain(theta, i, D));
  return v;
}

TEST(Rope, DefaultAndLinear) {
  ModelConfig c = head(128, 1e6);
  const RopeFrequencies d = rope_frequencies(c, false, 0);
  expect_rel(d.inv_freq, defaults(1e6, 128), "default");
  EXPECT_EQ(d.attention_factor, 1.0);
  for (double v : d.inv_freq) EXPECT_EQ(static_cast<double>(static_cast<float>(v)), v);  // f32
  c.rope_type = "linear";
  c.rope_factor = 8;
  std::vector<double> want = defaults(1e6, 128);
  for (double& w : want) w /= 8;
  expect_rel(rope_frequencies(c, false, 0).inv_freq, want, "linear");
}

// Llama-3.1 (theta 500000, head 128, factor 8, low 1, high 4, original 8192). By hand: dim i has
// wavelength 2 pi 500000^(i/64); it is < 2048 for i <= 28 (kept), > 8192 for i >= 35 (divided by
// 8), and between for i = 29..34, where the share kept is s = (8192 / wavelength - 1) / 3.
TEST(Rope, Llama31) {
  ModelConfig c = head(128, 500000);
  c.rope_type = "llama3";
  c.rope_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_position_embeddings = 8192;
  c.max_position_embeddings = 131072;
  const std::vector<double> got = rope_frequencies(c, false, 0).inv_freq;
  std::vector<double> want;
  int kept = 0, divided = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = plain(500000, i, 128);
    const double rotations = 8192 / (2 * M_PI / f);  // turns over the original context
    const double s = std::clamp((rotations - 1) / 3, 0.0, 1.0);
    want.push_back(f * ((1 - s) / 8 + s));
    kept += std::abs(got[i] / f - 1) < kRel;
    divided += std::abs(got[i] * 8 / f - 1) < kRel;
  }
  expect_rel(got, want, "llama3");
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(divided, 64 - 35);
}

// Dynamic NTK on a Llama-2-like head (theta 10000, head 128, max_position_embeddings 4096,
// factor 2): plain up to 4096 positions; at L = 8192 the base becomes
// 10000 * (2 * 8192 / 4096 - 1)^(128 / 126) = 10000 * 3^(64 / 63).
TEST(Rope, DynamicNtk) {
  ModelConfig c = head(128, 10000);
  c.rope_type = "dynamic";
  c.rope_factor = 2;
  c.max_position_embeddings = 4096;
  EXPECT_TRUE(rope_depends_on_length(c));
  for (int64_t L : {1, 2000, 4096})
    expect_rel(rope_frequencies(c, false, L).inv_freq, defaults(10000, 128),
               "dynamic at " + std::to_string(L));
  const double base = 10000 * std::pow(3.0, 64.0 / 63.0);
  expect_rel(rope_frequencies(c, false, 8192).inv_freq, defaults(base, 128), "dynamic at 8192",
             4e-6);
  std::mt19937 rng(std::random_device{}());
  const int64_t L = 4097 + static_cast<int64_t>(rng() % 100000);
  const double b = 10000 * std::pow(2.0 * L / 4096 - 1, 128.0 / 126.0);
  expect_rel(rope_frequencies(c, false, L).inv_freq, defaults(b, 128),
             "dynamic at " + std::to_string(L), 4e-6);
  // Longer contexts only ever lower every frequency but the first.
  const auto a = rope_frequencies(c, false, L).inv_freq,
             z = rope_frequencies(c, false, L + 999).inv_freq;
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(z[i], a[i]);
  for (const char* t : {"default", "linear", "llama3", "yarn"}) {
    c.rope_type = t;
    EXPECT_FALSE(rope_depends_on_length(c)) << t;
  }
}

// YaRN in rotation terms: dim i turns r = original * inv / (2 pi) times over the original
// context; the share of the plain frequency kept is 1 at r >= beta_fast, 0 at r <= beta_slow.
// With truncate the bounds are the dims low = floor(d(beta_fast)), high = ceil(d(beta_slow)) and
// the share falls linearly between them; without it, linearly in ln r.
std::vector<double> yarn_by_hand(double theta, int64_t D, double factor, double low, double high) {
  std::vector<double> v;
  for (int64_t i = 0; i < D / 2; ++i) {
    const double keep = 1 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    v.push_back(plain(theta, i, D) * (keep + (1 - keep) / factor));
  }
  return v;
}

// Qwen2.5 ("rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type":
// "yarn"}, theta 1e6, head 128). By hand: d(32) = 128 ln(32768 / 64 pi) / (2 ln 1e6) = 23.60,
// d(1) = 128 ln(32768 / 2 pi) / (2 ln 1e6) = 39.65, so the ramp runs from dim 23 to dim 40.
TEST(Rope, YarnQwen25) {
  ModelConfig c = head(128, 1e6);
  c.rope_type = "yarn";
  c.rope_factor = 4;
  c.rope_original_max_position_embeddings = 32768;
  c.max_position_embeddings = 131072;
  RopeFrequencies r = rope_frequencies(c, false, 0);
  expect_rel(r.inv_freq, yarn_by_hand(1e6, 128, 4, 23, 40), "qwen2.5 yarn");
  EXPECT_NEAR(r.attention_factor, 0.1 * std::log(4.0) + 1, 1e-15);
  EXPECT_NEAR(r.attention_factor, 1.1386294361119891, 1e-15);
  EXPECT_EQ(rope_frequencies(c, false, 1 << 20).inv_freq, r.inv_freq);  // not length-dependent

  c.rope_truncate = false;
  r = rope_frequencies(c, false, 0);
  std::vector<double> want;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = plain(1e6, i, 128), rot = 32768 * f / (2 * M_PI);
    const double keep = std::clamp(std::log(rot / 1) / std::log(32.0 / 1), 0.0, 1.0);
    want.push_back(f * (keep + (1 - keep) / 4));
  }
  expect_rel(r.inv_freq, want, "qwen2.5 yarn, truncate false");
  c.rope_attention_factor = 0.75;
  EXPECT_EQ(rope_frequencies(c, false, 0).attention_factor, 0.75);
}

// DeepSeek-V2-Lite's RoPE part (theta 10000, qk_rope_head_dim 64, factor 40, original 4096,
// mscale = mscale_all_dim = 0.707): d(32) = 64 ln(4096 / 64 pi) / (2 ln 1e4) = 10.47,
// d(1) = 22.51, so dims 10..23; the mscales cancel, so the attention factor is 1.
TEST(Rope, YarnDeepSeekMscale) {
  ModelConfig c = head(64, 10000);
  c.rope_type = "yarn";
  c.rope_factor = 40;
  c.rope_original_max_position_embeddings = 4096;
  c.max_position_embeddings = 163840;
  c.rope_mscale = 0.707;
  c.rope_mscale_all_dim = 0.707;
  RopeFrequencies r = rope_frequencies(c, false, 0);
  expect_rel(r.inv_freq, yarn_by_hand(10000, 64, 40, 10, 23), "deepseek yarn");
  EXPECT_EQ(r.attention_factor, 1.0);
  c.rope_mscale = 1.0;  // (0.1 ln 40 + 1) / (0.0707 ln 40 + 1)
  EXPECT_NEAR(rope_frequencies(c, false, 0).attention_factor,
              (0.1 * std::log(40.0) + 1) / (0.0707 * std::log(40.0) + 1), 1e-15);
  c.rope_mscale_all_dim = 0;  // one of them unset: 0.1 ln(factor) + 1
  EXPECT_NEAR(rope_frequencies(c, false, 0).attention_factor, 0.1 * std::log(40.0) + 1, 1e-15);
}

TEST(Rope, Reductions) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.5, 64);
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t D = 2 * (8 + static_cast<int64_t>(rng() % 60));
    const double theta = std::exp(std::uniform_real_distribution<double>(7, 15)(rng));
    ModelConfig c = head(D, theta);
    c.max_position_embeddings = 4096;
    const std::vector<double> base = rope_frequencies(c, false, 0).inv_freq;
    // factor 1 = default (dynamic: up to max_position_embeddings; above it even factor 1 grows
    // the base, by (L / max_position_embeddings)^(d / (d - 2)), as in transformers)
    for (const char* t : {"linear", "dynamic", "llama3", "yarn"}) {
      c.rope_type = t;
      c.rope_factor = 1;
      const RopeFrequencies r = rope_frequencies(c, false, 1 + static_cast<int64_t>(rng() % 4096));
      expect_rel(r.inv_freq, base, std::string(t) + " with factor 1", 1e-6);
      EXPECT_EQ(r.attention_factor, 1.0) << t;
    }
    // yarn: dims below the correction range keep the plain frequency, dims above it are divided
    // by the factor; the attention factor is 0.1 ln(factor) + 1.
    const double f = u(rng);
    c.rope_type = "yarn";
    c.rope_factor = f;
    const RopeFrequencies y = rope_frequencies(c, false, 0);
    auto dim = [&](double rot) {
      return D * std::log(4096 / (rot * 2 * M_PI)) / (2 * std::log(theta));
    };
    const double low = std::max(std::floor(dim(32)), 0.0);
    const double high = std::min(std::ceil(dim(1)), static_cast<double>(D - 1));
    int below = 0, above = 0;
    for (int64_t i = 0; i < D / 2; ++i) {
      if (i <= low) {
        EXPECT_EQ(y.inv_freq[i], base[i]) << i;
        ++below;
      }
      if (i >= high) {
        EXPECT_NEAR(y.inv_freq[i], base[i] / f, 2e-6 * base[i] / f) << i;
        ++above;
      }
      if (i > low && i < high) {
        EXPECT_LT(y.inv_freq[i], base[i]);
        EXPECT_GT(y.inv_freq[i], base[i] / f);
      }
    }
    EXPECT_GT(below, 0);
    EXPECT_GE(above, 0);
    EXPECT_NEAR(y.attention_factor, 0.1 * std::log(f) + 1, 1e-14);
    // llama3 with the bands past every dim is linear scaling.
    c.rope_type = "llama3";
    c.rope_original_max_position_embeddings = 1;
    c.rope_high_freq_factor = 4;
    c.rope_low_freq_factor = 1;
    std::vector<double> lin = base;
    for (double& v : lin) v /= f;
    expect_rel(rope_frequencies(c, false, 0).inv_freq, lin, "llama3 all long", 1e-6);
    c.rope_original_max_position_embeddings = 0;
  }
}

TEST(Rope, Gemma3LocalLayers) {
  ModelConfig c = head(16, 1e6);
  c.family = "gemma3";
  c.rope_type = "linear";
  c.rope_factor = 8;
  c.rope_local_base_freq = 10000;
  const RopeFrequencies local = rope_frequencies(c, true, 0);
  expect_rel(local.inv_freq, defaults(10000, 16), "local");
  EXPECT_EQ(local.attention_factor, 1.0);
  std::vector<double> global = defaults(1e6, 16);
  for (double& g : global) g /= 8;
  expect_rel(rope_frequencies(c, false, 0).inv_freq, global, "global");
  c.rope_local_base_freq = 0;  // sliding layers then use the global settings
  EXPECT_EQ(rope_frequencies(c, true, 0).inv_freq, rope_frequencies(c, false, 0).inv_freq);
}

// ---- config.json ----

ModelConfig read(const json& j, ModelConfig c = ModelConfig{}) {
  read_hf_rope(j, "m/config.json", c);
  return c;
}

void expect_same_rope(const ModelConfig& a, const ModelConfig& b, const std::string& what) {
  json ja, jb;
  write_hf_rope(a, ja);
  write_hf_rope(b, jb);
  EXPECT_EQ(ja, jb) << what;
  EXPECT_EQ(a.rope_local_base_freq, b.rope_local_base_freq) << what;
  for (bool local : {false, true})
    for (int64_t L : {int64_t{100}, int64_t{100000}}) {
      const RopeFrequencies x = rope_frequencies(a, local, L), y = rope_frequencies(b, local, L);
      EXPECT_EQ(x.inv_freq, y.inv_freq) << what;
      EXPECT_EQ(x.attention_factor, y.attention_factor) << what;
    }
}

// Published configs, each in the legacy spelling and in transformers 5's rope_parameters.
TEST(HfRope, PublishedConfigsBothSpellings) {
  const json llama31 = {{"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192},
                        {"rope_type", "llama3"}};
  const json qwen25 = {
      {"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "yarn"}};
  const json deepseek = {
      {"beta_fast", 32}, {"beta_slow", 1},          {"factor", 40},
      {"mscale", 0.707}, {"mscale_all_dim", 0.707}, {"original_max_position_embeddings", 4096},
      {"type", "yarn"}};
  const json ntk = {{"type", "dynamic"}, {"factor", 2.0}};
  const json linear = {{"rope_type", "linear"}, {"factor", 4.0}};
  for (const auto& [theta, scaling] : std::vector<std::pair<double, json>>{{500000.0, llama31},
                                                                           {1e6, qwen25},
                                                                           {10000.0, deepseek},
                                                                           {10000.0, ntk},
                                                                           {10000.0, linear}}) {
    ModelConfig base = head(64, 10000);
    base.max_position_embeddings = 32768;
    const ModelConfig old = read({{"rope_theta", theta}, {"rope_scaling", scaling}}, base);
    json params = scaling;
    params["rope_theta"] = theta;
    const ModelConfig v5 = read({{"rope_parameters", params}}, base);
    const std::string what = scaling.dump();
    EXPECT_EQ(old.rope_theta, theta) << what;
    EXPECT_EQ(old.rope_factor, scaling["factor"].get<double>()) << what;
    expect_same_rope(old, v5, what);
    json written;  // and back through write_hf_rope
    write_hf_rope(old, written);
    expect_same_rope(old, read(written, base), what + " round trip");
    // transformers 5 reads rope_parameters; older readers rope_scaling: both carry the same.
    json a = written, b = written;
    a.erase("rope_scaling");
    b.erase("rope_parameters");
    expect_same_rope(old, read(a, base), what + " rope_parameters only");
    expect_same_rope(old, read(b, base), what + " rope_scaling only");
  }
  const ModelConfig d = read({{"rope_scaling", deepseek}});
  EXPECT_EQ(d.rope_mscale, 0.707);
  EXPECT_EQ(d.rope_mscale_all_dim, 0.707);
  EXPECT_EQ(d.rope_original_max_position_embeddings, 4096);
  EXPECT_EQ(d.rope_type, "yarn");
}

TEST(HfRope, EveryFieldRoundTrips) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(1.1, 9);
  for (const char* t : {"default", "linear", "dynamic", "llama3", "yarn"}) {
    ModelConfig c = head(32, std::round(u(rng) * 10000));
    c.max_position_embeddings = 8192;
    c.rope_type = t;
    if (c.rope_type != "default") c.rope_factor = u(rng);
    if (c.rope_type == "llama3" || c.rope_type == "yarn")
      c.rope_original_max_position_embeddings = 512 + rng() % 4096;
    if (c.rope_type == "llama3") {
      c.rope_low_freq_factor = u(rng);
      c.rope_high_freq_factor = c.rope_low_freq_factor + u(rng);
    }
    if (c.rope_type == "yarn") {
      c.rope_attention_factor = u(rng);
      c.rope_beta_fast = 20 + u(rng);
      c.rope_beta_slow = u(rng) / 4;
      c.rope_mscale = u(rng);
      c.rope_mscale_all_dim = u(rng);
      c.rope_truncate = false;
    }
    validate_rope(c);
    json j;
    write_hf_rope(c, j);
    ModelConfig back = head(32, 10000);
    back.max_position_embeddings = 8192;
    back = read(j, back);
    EXPECT_EQ(back.rope_type, c.rope_type);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.rope_factor, c.rope_factor) << t;
    EXPECT_EQ(back.rope_low_freq_factor, c.rope_low_freq_factor) << t;
    EXPECT_EQ(back.rope_high_freq_factor, c.rope_high_freq_factor) << t;
    EXPECT_EQ(back.rope_original_max_position_embeddings, c.rope_original_max_position_embeddings);
    EXPECT_EQ(back.rope_attention_factor, c.rope_attention_factor) << t;
    EXPECT_EQ(back.rope_beta_fast, c.rope_beta_fast) << t;
    EXPECT_EQ(back.rope_beta_slow, c.rope_beta_slow) << t;
    EXPECT_EQ(back.rope_mscale, c.rope_mscale) << t;
    EXPECT_EQ(back.rope_mscale_all_dim, c.rope_mscale_all_dim) << t;
    EXPECT_EQ(back.rope_truncate, c.rope_truncate) << t;
    expect_same_rope(c, back, t);
  }
}

TEST(HfRope, TransformersDefaultsAndPriorities) {
  ModelConfig base = head(64, 10000);
  base.max_position_embeddings = 131072;
  // yarn with factor null: transformers 5 derives max_position_embeddings / original.
  json j = {{"max_position_embeddings", 131072},
            {"rope_scaling",
             {{"type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 32768}}}};
  EXPECT_EQ(read(j, base).rope_factor, 4.0);
  // A top-level original_max_position_embeddings (Phi-3 style) wins for yarn and llama3.
  j["rope_scaling"]["factor"] = 2.0;
  j["original_max_position_embeddings"] = 4096;
  EXPECT_EQ(read(j, base).rope_original_max_position_embeddings, 4096);
  EXPECT_EQ(read(j, base).rope_factor, 2.0);  // an explicit factor is kept
  // dynamic scales from max_position_embeddings: original_max_position_embeddings is ignored.
  j["rope_scaling"] = {
      {"type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 1024}};
  EXPECT_EQ(read(j, base).rope_original_max_position_embeddings, 0);
  // beta_fast / beta_slow of 0 or null mean 32 / 1 (transformers' `or`); rope_theta inside the
  // dict beats the top-level one; rope_scaling beats rope_parameters.
  j = {{"rope_theta", 5.0},
       {"rope_parameters", {{"rope_type", "linear"}, {"factor", 3.0}}},
       {"rope_scaling",
        {{"type", "yarn"},
         {"factor", 8.0},
         {"beta_fast", 0},
         {"beta_slow", nullptr},
         {"rope_theta", 7.0}}}};
  const ModelConfig c = read(j, base);
  EXPECT_EQ(c.rope_type, "yarn");
  EXPECT_EQ(c.rope_theta, 7.0);
  EXPECT_EQ(c.rope_beta_fast, 32.0);
  EXPECT_EQ(c.rope_beta_slow, 1.0);
  // A file without RoPE keys keeps the caller's theta (family defaults) and resets the scaling.
  ModelConfig scaled = base;
  scaled.rope_theta = 1e6;
  scaled.rope_type = "linear";
  scaled.rope_factor = 4;
  const ModelConfig none = read(json::object(), scaled);
  EXPECT_EQ(none.rope_theta, 1e6);
  EXPECT_EQ(none.rope_type, "default");
  EXPECT_EQ(none.rope_factor, 1.0);
}

// gemma3: transformers 5's per-layer-type rope_parameters and the older rope_theta /
// rope_scaling / rope_local_base_freq (gemma-3-4b's text config) read alike and write back.
TEST(HfRope, Gemma3Forms) {
  ModelConfig g = head(16, 1e6);
  g.family = "gemma3";
  g.rope_local_base_freq = 10000;  // the family default
  const ModelConfig old = read({{"rope_theta", 1e6},
                                {"rope_local_base_freq", 5000.0},
                                {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}},
                               g);
  const ModelConfig v5 =
      read({{"rope_parameters",
             {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}}}},
           g);
  EXPECT_EQ(old.rope_local_base_freq, 5000.0);
  EXPECT_EQ(old.rope_type, "linear");
  expect_same_rope(old, v5, "gemma3");
  json w;
  write_hf_rope(old, w);
  EXPECT_EQ(w["rope_parameters"]["sliding_attention"],
            json({{"rope_type", "default"}, {"rope_theta", 5000.0}}));
  EXPECT_EQ(w["rope_parameters"]["full_attention"]["factor"], 8.0);
  EXPECT_EQ(w["rope_local_base_freq"], 5000.0);
  expect_same_rope(old, read(w, g), "gemma3 round trip");
  // A sliding dict without rope_theta takes the local default; a top-level rope_scaling is
  // merged into full_attention.
  const ModelConfig merged = read({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}}},
                                   {"rope_parameters",
                                    {{"full_attention", {{"rope_theta", 1e6}}},
                                     {"sliding_attention", {{"rope_type", "default"}}}}}},
                                  g);
  EXPECT_EQ(merged.rope_type, "yarn");
  EXPECT_EQ(merged.rope_local_base_freq, 10000.0);
  // rope_local_base_freq 0 (sliding layers as the full ones) survives as sliding == full.
  ModelConfig same = old;
  same.rope_local_base_freq = 0;
  json s;
  write_hf_rope(same, s);
  EXPECT_EQ(s["rope_parameters"]["sliding_attention"], s["rope_parameters"]["full_attention"]);
  EXPECT_FALSE(s.contains("rope_local_base_freq"));
  expect_same_rope(same, read(s, g), "gemma3 sliding = full");
}

// ---- bad input ----

void bad(const json& j, std::initializer_list<std::string> parts) {
  std::vector<std::string> all = {"m/config.json"};
  all.insert(all.end(), parts.begin(), parts.end());
  ModelConfig c;
  try {
    read_hf_rope(j, "m/config.json", c);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const UserError& e) {
    for (const std::string& p : all)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(HfRope, BadInputs) {
  bad({{"rope_scaling", {{"type", "longrope"}, {"factor", 2.0}}}},
      {"'rope_scaling.type'", "'longrope'", "supported: default, linear, dynamic, llama3, yarn"});
  bad({{"rope_parameters", {{"rope_type", "proportional"}}}},
      {"'rope_parameters.rope_type'", "'proportional'"});
  bad({{"rope_parameters", {{"rope_type", 3}}}}, {"'rope_parameters.rope_type'", "a string"});
  bad({{"rope_scaling", {{"type", "linear"}}}}, {"'rope_scaling.factor'", "missing", "linear"});
  bad({{"rope_scaling", {{"type", "dynamic"}, {"factor", nullptr}}}},
      {"'rope_scaling.factor'", "null"});
  bad({{"rope_scaling", {{"type", "linear"}, {"factor", "2"}}}},
      {"'rope_scaling.factor'", "a number"});
  bad({{"rope_scaling", {{"type", "llama3"}, {"factor", 8}, {"high_freq_factor", 4}}}},
      {"'rope_scaling.low_freq_factor'", "missing"});
  bad({{"rope_scaling", {{"type", "yarn"}, {"factor", 4}, {"attention_factor", 0}}}},
      {"'rope_scaling.attention_factor'", "> 0"});
  bad({{"rope_scaling", {{"type", "yarn"}, {"factor", 4}, {"truncate", "no"}}}},
      {"'rope_scaling.truncate'", "true or false"});
  bad({{"rope_scaling",
        {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1.5}}}},
      {"'rope_scaling.original_max_position_embeddings'", "positive integer"});
  bad({{"rope_scaling", {{"type", "yarn"}, {"factor", 4}}},
       {"original_max_position_embeddings", 0}},
      {"'original_max_position_embeddings'", "positive integer"});
  bad({{"rope_scaling", 4}}, {"'rope_scaling'", "an object"});
  bad({{"rope_parameters", "yarn"}}, {"'rope_parameters'", "an object"});
  bad({{"rope_theta", "1e4"}}, {"'rope_theta'", "a number"});
  bad({{"partial_rotary_factor", 0.5}}, {"'partial_rotary_factor'", "whole head"});
  bad({{"rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.25}}}},
      {"'rope_parameters.partial_rotary_factor'"});
  bad({{"rope_parameters",
        {{"full_attention", json::object()}, {"chunked_attention", json::object()}}}},
      {"'rope_parameters.chunked_attention'", "layer type"});
  bad({{"rope_parameters", {{"full_attention", 1}}}},
      {"'rope_parameters.full_attention'", "object"});
  bad({{"rope_parameters",
        {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}}},
         {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}}}},
      {"'rope_parameters.sliding_attention.rope_type'", "'linear'", "full_attention"});
  bad({{"rope_parameters", {{"full_attention", {{"rope_type", "longrope"}}}}}},
      {"'rope_parameters.full_attention.rope_type'", "'longrope'"});
}

TEST(Rope, ValidateMessages) {
  auto expect = [](auto edit, std::initializer_list<std::string> parts) {
    ModelConfig c = head(32, 10000);
    edit(c);
    test::expect_user_error([&] { validate_rope(c); }, parts);
  };
  expect([](ModelConfig& c) { c.rope_type = "longrope"; },
         {"model.rope_type", "'longrope'", "default, linear, dynamic, llama3, yarn"});
  expect([](ModelConfig& c) { c.rope_theta = 0; }, {"model.rope_theta", "> 0"});
  expect([](ModelConfig& c) { c.rope_type = "linear", c.rope_factor = -1; },
         {"model.rope_factor", "> 0", "-1"});
  expect([](ModelConfig& c) { c.rope_factor = 4; },
         {"model.rope_factor", "model.rope_type", "default"});
  expect([](ModelConfig& c) { c.rope_original_max_position_embeddings = -5; },
         {"model.rope_original_max_position_embeddings", ">= 0"});
  expect(
      [](ModelConfig& c) {
        c.rope_type = "dynamic", c.rope_factor = 2, c.rope_original_max_position_embeddings = 64;
      },
      {"model.rope_original_max_position_embeddings", "dynamic", "model.max_position_embeddings"});
  expect(
      [](ModelConfig& c) {
        c.rope_type = "llama3", c.rope_factor = 8, c.rope_high_freq_factor = 1;
      },
      {"model.rope_high_freq_factor", "model.rope_low_freq_factor"});
  expect(
      [](ModelConfig& c) { c.rope_type = "llama3", c.rope_factor = 8, c.rope_low_freq_factor = 0; },
      {"model.rope_low_freq_factor", "> 0"});
  expect([](ModelConfig& c) { c.rope_type = "yarn", c.rope_factor = 4, c.rope_beta_fast = 0.5; },
         {"model.rope_beta_fast", "model.rope_beta_slow"});
  expect([](ModelConfig& c) { c.rope_type = "yarn", c.rope_factor = 4, c.rope_beta_slow = 0; },
         {"model.rope_beta_slow", "> 0"});
  expect(
      [](ModelConfig& c) { c.rope_type = "yarn", c.rope_factor = 4, c.rope_attention_factor = -1; },
      {"model.rope_attention_factor", ">= 0"});
  expect([](ModelConfig& c) { c.rope_type = "yarn", c.rope_factor = 4, c.rope_mscale = -1; },
         {"model.rope_mscale", ">= 0"});
  expect(
      [](ModelConfig& c) { c.rope_type = "yarn", c.rope_factor = 4, c.rope_mscale_all_dim = -1; },
      {"model.rope_mscale_all_dim", ">= 0"});
  expect([](ModelConfig& c) { c.rope_local_base_freq = -1; },
         {"model.rope_local_base_freq", ">= 0"});
  expect([](ModelConfig& c) { c.family = "mistral", c.rope_local_base_freq = 10000; },
         {"model.rope_local_base_freq", "gemma3", "mistral"});
  for (const char* t : {"default", "linear", "dynamic", "llama3", "yarn"}) {  // and the good ones
    ModelConfig c = head(32, 10000);
    c.rope_type = t;
    if (c.rope_type != "default") c.rope_factor = 4;
    EXPECT_NO_THROW(validate_rope(c)) << t;
  }
}

}  // namespace
}  // namespace lmt
