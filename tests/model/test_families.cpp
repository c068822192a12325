// Every family's switches on tiny models in double precision: every parameter's gradient against
// central finite differences (with and without activation checkpointing), the KV cache against
// the full forward, and packed rows against separate documents. Together with the transformers
// fixtures (tests/hf) this covers configurations the fixtures do not: gemma3 (q/k norm with
// (1 + w), a window pattern and a local RoPE base), untied gemma and gpt2 heads, soft-caps with
// windows and GQA at once.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "model_test_util.h"
#include "model_passes.h"

namespace lmt {
namespace {

using test::random_ids;
using test::randomise;
using test::Variant;
using test::variants;

// Every element of every parameter: the gradient `grad` (in the flat layout of `w`) against
// central differences of `loss` in `w`, within 1e-7 relative to the largest difference.
template <class Loss>
void expect_gradients_match(const std::vector<ParamInfo>& params, double* w,
                            const std::vector<double>& grad, Loss&& loss) {
  const double h = 1e-5;
  for (const ParamInfo& p : params) {
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      double& x = w[p.offset + i];
      const double x0 = x;
      x = x0 + h;
      const double lp = loss();
      x = x0 - h;
      const double lm = loss();
      x = x0;
      const double fd = (lp - lm) / (2 * h);
      max_err = std::max(max_err, std::abs(fd - grad[p.offset + i]));
      max_ref = std::max(max_ref, std::abs(fd));
    }
    EXPECT_GT(max_ref, 0.0) << p.name << ": gradient is identically zero";
    EXPECT_LT(max_err, 1e-7 * std::max(1.0, max_ref)) << p.name << " max |fd - grad| " << max_err;
  }
}

class Family : public testing::TestWithParam<Variant> {};

TEST_P(Family, GradientsMatchFiniteDifferences) {
  for (bool ckpt : {false, true}) {
    SCOPED_TRACE(ckpt ? "checkpointing" : "no checkpointing");
    CpuBackend be;
    Transformer m(&be, GetParam().cfg, DType::f64);
    m.set_activation_checkpointing(ckpt);
    m.set_loss_chunk_tokens(5);
    randomise(m, ckpt ? 3 : 4, 0.3);
    const int64_t B = 2, T = 7;
    const auto ids = random_ids(B * T, 11, 5);
    auto labels = random_ids(B * T, 11, 6);
    labels[4] = Transformer::kIgnoreIndex;
    m.zero_grads();
    const LossSum s = lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0);
    std::vector<double> grad(static_cast<size_t>(m.flat_size()));
    be.to_host(grad.data(), m.grads_data(), grad.size() * sizeof(double));
    auto* w = static_cast<double*>(m.params_data());
    auto loss = [&] { return batch_loss(m, ids.data(), labels.data(), B, T).sum; };
    EXPECT_NEAR(loss(), s.sum, 1e-12);
    expect_gradients_match(m.params(), w, grad, loss);
  }
}

TEST_P(Family, KvCacheMatchesFullForward) {
  if (GetParam().cfg.rope_type == "dynamic")
    GTEST_SKIP() << "dynamic RoPE changes with the length, so cached keys differ (as in transformers)";
  CpuBackend be;
  Transformer m(&be, GetParam().cfg, DType::f64);
  randomise(m, 8, 0.3);
  const int64_t T = 9, V = 11;
  const auto ids = random_ids(T, V, 9);
  const std::vector<double> full = m.forward_logits(ids.data(), 1, T);
  auto cache = m.make_kv_cache(T);
  std::vector<float> last = m.feed(*cache, ids.data(), 4);  // prefill 4, then one at a time
  for (int64_t t = 4; t <= T; ++t) {
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(last[v], full[(t - 1) * V + v], 1e-5) << "position " << t - 1;
    if (t < T) last = m.feed(*cache, &ids[t], 1);
  }
}

TEST_P(Family, PackedRowEqualsSeparateDocuments) {
  CpuBackend be;
  Transformer m(&be, GetParam().cfg, DType::f64);
  randomise(m, 10, 0.3);
  const int64_t lens[] = {5, 6}, T = 11, V = 11;
  const auto ids = random_ids(T, V, 11);
  std::vector<int32_t> pos, start;
  for (int64_t d = 0, at = 0; d < 2; at += lens[d], ++d)
    for (int64_t i = 0; i < lens[d]; ++i) {
      pos.push_back(static_cast<int32_t>(i));
      start.push_back(static_cast<int32_t>(at));
    }
  const Transformer::Packing packing{pos.data(), start.data()};
  const std::vector<double> packed = m.forward_logits(ids.data(), 1, T, &packing);
  const std::vector<double> second = m.forward_logits(&ids[5], 1, 6);
  for (int64_t i = 0; i < 6 * V; ++i) ASSERT_NEAR(packed[5 * V + i], second[i], 1e-12) << i;
}

// LoRA: every adapter's gradient against central finite differences, with and without
// activation checkpointing, on a packed row with document masking, for all-linear adapters and
// for an adapter on one slice of a fused GEMM alone (q of q|k|v, up of gate|up; gpt2: c_fc). The
// base gets no gradient buffer and its weights are the adapters' fixed point: bit-identical after
// a backward pass. Adapters as initialised (B = 0) leave the logits exactly the base model's.
TEST_P(Family, LoraGradientsMatchFiniteDifferences) {
  const bool gpt2 = GetParam().cfg.traits().conv1d;
  for (const char* targets : {"all", "one"})
    for (bool ckpt : {false, true}) {
      SCOPED_TRACE(std::string(targets) + (ckpt ? ", checkpointing" : ""));
      CpuBackend be;
      Transformer m(&be, GetParam().cfg, DType::f64);
      m.set_activation_checkpointing(ckpt);
      m.set_loss_chunk_tokens(5);
      randomise(m, 12, 0.3);
      const int64_t B = 1, T = 11, V = 11;
      const auto ids = random_ids(B * T, V, 13);
      auto labels = random_ids(B * T, V, 14);
      labels[2] = Transformer::kIgnoreIndex;
      std::vector<int32_t> pos, start;
      for (int64_t d = 0, at = 0, lens[] = {5, 6}; d < 2; at += lens[d], ++d)
        for (int64_t i = 0; i < lens[d]; ++i) {
          pos.push_back(static_cast<int32_t>(i));
          start.push_back(static_cast<int32_t>(at));
        }
      const Transformer::Packing packing{pos.data(), start.data()};
      const std::vector<double> base_logits = m.forward_logits(ids.data(), B, T, &packing);
      std::vector<double> base(static_cast<size_t>(m.flat_size()));
      be.to_host(base.data(), m.params_data(), base.size() * sizeof(double));

      LoraSpec spec;
      spec.rank = 2;
      spec.alpha = 3;
      spec.use_rslora = ckpt;
      spec.dropout = ckpt ? 0.3 : 0.0;  // the recomputed layers must draw the forward's masks
      if (std::string(targets) == "all") {
        spec.target_modules = {"all-linear"};
        // Every norm trains beside the adapters, and an untied model's tables and head.
        spec.modules_to_save = gpt2 ? std::vector<std::string>{"ln_1", "ln_2", "ln_f", "wpe"}
                                    : std::vector<std::string>{"norm"};
        if (!GetParam().cfg.tie_word_embeddings)
          for (const char* m : {"lm_head", gpt2 ? "wte" : "embed_tokens"})
            spec.modules_to_save.push_back(m);
      }
      else if (gpt2)
        spec.target_modules = {"c_fc"};
      else
        spec.target_modules = {"q_proj", "up_proj"};
      m.add_lora(spec, 15);
      EXPECT_EQ(m.grads_data(), nullptr);
      EXPECT_EQ(m.forward_logits(ids.data(), B, T, &packing), base_logits);
      // Random B (and A) so that every adapter gradient is non-zero.
      std::vector<double> lw(static_cast<size_t>(m.lora_flat_size()), 0.0);
      fill_normal(lw.data(), m.lora_flat_size(), 0.0, 0.15, 16, 3);
      be.from_host(m.lora_data(), lw.data(), lw.size() * sizeof(double));

      m.zero_grads();
      const LossSum s = lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0, &packing);
      std::vector<double> grad(static_cast<size_t>(m.lora_flat_size()));
      be.to_host(grad.data(), m.lora_grads_data(), grad.size() * sizeof(double));
      auto* w = static_cast<double*>(m.lora_data());
      // With dropout the loss of forward_backward (fixed masks) is the function differentiated;
      // forward_loss (evaluation) applies none.
      const double eval_loss = batch_loss(m, ids.data(), labels.data(), B, T, &packing).sum;
      auto loss = [&] {
        if (spec.dropout == 0) return batch_loss(m, ids.data(), labels.data(), B, T, &packing).sum;
        return lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0, &packing).sum;
      };
      EXPECT_NEAR(loss(), s.sum, 1e-12);
      if (spec.dropout > 0) EXPECT_GT(std::abs(eval_loss - s.sum), 1e-6);
      expect_gradients_match(m.lora_params(), w, grad, loss);
      const size_t n_params = m.lora_params().size() - m.lora_saved().size();
      const size_t per_layer = std::string(targets) == "all" ? (gpt2 ? 4 : 7) : (gpt2 ? 1 : 2);
      EXPECT_EQ(n_params, 2 * per_layer * static_cast<size_t>(GetParam().cfg.num_hidden_layers));
      if (std::string(targets) == "all") {  // every norm parameter, and untied tables and head
        size_t want = 0;
        for (const ParamInfo& p : m.params())
          want += p.kind == ParamKind::norm || (gpt2 && p.name.find("ln_") != std::string::npos) ||
                  p.name == "transformer.wpe.weight" ||
                  (!GetParam().cfg.tie_word_embeddings &&
                   (p.kind == ParamKind::embedding || p.name == "lm_head.weight"));
        EXPECT_EQ(m.lora_saved().size(), want);
      }
      std::vector<double> after(base.size());
      be.to_host(after.data(), m.params_data(), after.size() * sizeof(double));
      EXPECT_EQ(after, base);
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, Family, testing::ValuesIn(variants()),
                         [](const testing::TestParamInfo<Variant>& i) { return i.param.name; });

// The switches that no fixture covers change the output: gemma3's local RoPE base and its
// window pattern, and gpt2's learned positions.
TEST(Families, Gemma3LocalRopeBaseAndPatternMatter) {
  CpuBackend be;
  ModelConfig base;
  for (const Variant& v : variants())
    if (std::string(v.name) == "gemma3") base = v.cfg;
  ASSERT_EQ(base.family, "gemma3");
  const auto ids = random_ids(9, 11, 12);
  auto logits = [&](const ModelConfig& c) {
    Transformer m(&be, c, DType::f64);
    randomise(m, 13, 0.3);
    return m.forward_logits(ids.data(), 1, 9);
  };
  const std::vector<double> ref = logits(base);
  ModelConfig other_base = base;
  other_base.rope_local_base_freq = 20.0;
  ModelConfig all_global = base;
  all_global.sliding_window = 0;
  ModelConfig other_pattern = base;
  other_pattern.sliding_window_pattern = 2;
  for (const ModelConfig* c : {&other_base, &all_global, &other_pattern}) {
    const std::vector<double> got = logits(*c);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::abs(got[i] - ref[i]));
    EXPECT_GT(diff, 1e-6);
  }
}

// The model uses what RoPE scaling computes (tests/model/test_rope.cpp checks the numbers): yarn's
// cos/sin factor, and dynamic NTK's base, which grows with the batch's length — so the first tokens
// of a long row differ from the same tokens alone, which causal attention otherwise guarantees
// equal.
TEST(Families, RopeScalingReachesTheModel) {
  CpuBackend be;
  ModelConfig yarn, dynamic;
  for (const Variant& v : variants()) {
    if (std::string(v.name) == "llama_yarn") yarn = v.cfg;
    if (std::string(v.name) == "qwen3_dynamic") dynamic = v.cfg;
  }
  const auto ids = random_ids(11, 11, 14);
  auto logits = [&](const ModelConfig& c, int64_t T) {
    Transformer m(&be, c, DType::f64);
    randomise(m, 15, 0.3);
    return m.forward_logits(ids.data(), 1, T);
  };
  auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; ++i) d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  };
  ModelConfig unit = yarn;
  unit.rope_attention_factor = 1.0;  // derived: 0.1 ln 4 + 1
  EXPECT_GT(max_diff(logits(yarn, 11), logits(unit, 11), 11 * 11), 1e-6);
  const std::vector<double> alone = logits(dynamic, 5), row = logits(dynamic, 11);
  EXPECT_GT(max_diff(alone, row, 5 * 11), 1e-6);  // L = 11 > 6: grown base
  const std::vector<double> shorter = logits(dynamic, 6);
  EXPECT_LT(max_diff(alone, shorter, 5 * 11), 1e-12);  // L = 5 and 6: both plain
}

TEST(Families, WindowPatternSelectsLayers) {
  ModelConfig c = family_defaults("gemma3");
  c.num_hidden_layers = 12;
  std::string got;
  for (int64_t l = 0; l < 12; ++l) got += c.is_sliding_layer(l) ? 'S' : 'F';
  EXPECT_EQ(got, "SSSSSFSSSSSF");
  c = family_defaults("gemma2");
  c.num_hidden_layers = 4;
  got.clear();
  for (int64_t l = 0; l < 4; ++l) got += c.is_sliding_layer(l) ? 'S' : 'F';
  EXPECT_EQ(got, "SFSF");
  c = family_defaults("mistral");
  EXPECT_TRUE(c.is_sliding_layer(0) && c.is_sliding_layer(7));
  c.sliding_window = 0;
  EXPECT_FALSE(c.is_sliding_layer(0));
}

}  // namespace
}  // namespace lmt
