// The whole model: every parameter's gradient against central finite differences in double
// precision, activation checkpointing, the KV cache and gradient-accumulation invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "model_test_util.h"
#include "model_passes.h"

namespace lmt {
namespace {

using test::random_ids;
using test::randomise;

ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.vocab_size = 11;
  c.hidden_size = 12;
  c.intermediate_size = 10;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.rope_theta = 100.0;
  c.tie_word_embeddings = tied;
  return c;
}

double loss_of(Transformer& m, const std::vector<int32_t>& ids, const std::vector<int32_t>& labels,
               int64_t B, int64_t T) {
  LossSum s = batch_loss(m, ids.data(), labels.data(), B, T);
  return s.sum / static_cast<double>(s.tokens);
}

void gradient_check(bool tied, bool checkpointing) {
  CpuBackend be;
  Transformer m(&be, tiny_config(tied), DType::f64);
  m.set_activation_checkpointing(checkpointing);
  m.set_loss_chunk_tokens(5);  // several chunks, one partial
  randomise(m, tied ? 11 : 12, 0.3);
  const int64_t B = 2, T = 7;
  auto ids = random_ids(B * T, 11, 3);
  auto labels = random_ids(B * T, 11, 4);
  labels[3] = Transformer::kIgnoreIndex;  // masked labels carry no loss
  labels[9] = Transformer::kIgnoreIndex;
  int64_t valid = 0;
  for (int32_t l : labels) valid += l != Transformer::kIgnoreIndex;

  m.zero_grads();
  LossSum s = lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0 / static_cast<double>(valid));
  ASSERT_EQ(s.tokens, valid);
  std::vector<double> grad(static_cast<size_t>(m.flat_size()));
  be.to_host(grad.data(), m.grads_data(), grad.size() * sizeof(double));
  auto* w = static_cast<double*>(m.params_data());

  const double h = 1e-5;
  for (const ParamInfo& p : m.params()) {
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      double& x = w[p.offset + i];
      const double x0 = x;
      x = x0 + h;
      const double lp = loss_of(m, ids, labels, B, T);
      x = x0 - h;
      const double lm = loss_of(m, ids, labels, B, T);
      x = x0;
      const double fd = (lp - lm) / (2 * h);
      max_err = std::max(max_err, std::abs(fd - grad[p.offset + i]));
      max_ref = std::max(max_ref, std::abs(fd));
    }
    EXPECT_GT(max_ref, 0.0) << p.name << ": gradient is identically zero";
    EXPECT_LT(max_err, 1e-7 * std::max(1.0, max_ref))
        << p.name << " max |fd - grad| " << max_err << " (max |fd| " << max_ref << ")";
  }
}

TEST(Transformer, GradientCheckEveryParameterUntied) {
  gradient_check(false, false);
}
TEST(Transformer, GradientCheckEveryParameterTied) {
  gradient_check(true, false);
}
TEST(Transformer, GradientCheckWithActivationCheckpointing) {
  gradient_check(false, true);
}

TEST(Transformer, LayoutUsesHuggingFaceNames) {
  CpuBackend be;
  Transformer m(&be, tiny_config(false), DType::f32);
  EXPECT_EQ(m.params().front().name, "model.embed_tokens.weight");
  EXPECT_EQ(m.params().back().name, "lm_head.weight");
  EXPECT_EQ(m.param("model.layers.1.self_attn.k_proj.weight").shape, (Shape{4, 12}));
  EXPECT_EQ(m.param("model.layers.0.mlp.down_proj.weight").shape, (Shape{12, 10}));
  // q, k, v and gate, up are contiguous so that each group is one GEMM.
  const auto& q = m.param("model.layers.0.self_attn.q_proj.weight");
  const auto& k = m.param("model.layers.0.self_attn.k_proj.weight");
  const auto& v = m.param("model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(k.offset, q.offset + q.numel());
  EXPECT_EQ(v.offset, k.offset + k.numel());
  const int64_t expected =
      11 * 12 * 2 + 2 * (12 + 12 * 12 + 4 * 12 * 2 + 12 * 12 + 12 + 3 * 12 * 10) + 12;
  EXPECT_EQ(m.num_params(), expected);
}

TEST(Transformer, CheckpointingGivesBitIdenticalGradients) {
  CpuBackend be;
  ModelConfig cfg = tiny_config(false);
  cfg.hidden_size = 24;
  cfg.head_dim = 8;
  Transformer a(&be, cfg, DType::f32), b(&be, cfg, DType::f32);
  a.init_weights(5);
  b.init_weights(5);
  b.set_activation_checkpointing(true);
  auto ids = random_ids(3 * 9, 11, 8), labels = random_ids(3 * 9, 11, 9);
  a.zero_grads();
  b.zero_grads();
  LossSum la = lmt::test::train_batch(a, ids.data(), labels.data(), 3, 9, 0.01);
  LossSum lb = lmt::test::train_batch(b, ids.data(), labels.data(), 3, 9, 0.01);
  EXPECT_EQ(la.sum, lb.sum);
  std::vector<float> ga(static_cast<size_t>(a.flat_size())), gb(ga.size());
  be.to_host(ga.data(), a.grads_data(), ga.size() * 4);
  be.to_host(gb.data(), b.grads_data(), gb.size() * 4);
  EXPECT_EQ(ga, gb);
  EXPECT_LT(b.activation_bytes(3, 9), a.activation_bytes(3, 9));
}

// train.activation_bits: 1 on gpt2 with ReLU and ReLU^2: loss and every gradient the same bits as
// with the pre-activation kept, with and without checkpointing and LoRA; the arena smaller by one
// [N, F] tensor per layer set, less ReLU's mask.
TEST(Transformer, ActivationBitsGiveBitIdenticalGradients) {
  CpuBackend be;
  for (const char* act : {"relu", "relu2"}) {
    for (bool checkpointing : {false, true}) {
      for (bool lora : {false, true}) {
        SCOPED_TRACE(std::string(act) + (checkpointing ? " checkpointing" : "") +
                     (lora ? " lora" : ""));
        ModelConfig cfg = test::tiny("gpt2");
        cfg.hidden_act = act;
        cfg.hidden_size = 24;
        cfg.intermediate_size = 37;  // N F = 999: a partial last mask word
        Transformer a(&be, cfg, DType::f32), b(&be, cfg, DType::f32);
        std::vector<float> gs[2];
        LossSum ls[2];
        for (int i = 0; i < 2; ++i) {
          Transformer& m = i == 0 ? a : b;
          m.init_weights(5);
          m.set_activation_checkpointing(checkpointing);
          m.set_activation_bits(i);
          if (lora) {
            LoraSpec spec;
            spec.rank = 2;
            spec.alpha = 4;
            spec.target_modules = {"all-linear"};
            spec.dropout = 0.25;
            m.add_lora(spec, 6);
            const std::vector<float> w = test::random_floats(m.lora_flat_size(), 4, 0.3);
            be.from_host(m.lora_data(), w.data(), w.size() * sizeof(float));
            m.set_dropout(9, 1);
          }
          auto ids = random_ids(3 * 9, 11, 8), labels = random_ids(3 * 9, 11, 9);
          m.zero_grads();
          ls[i] = lmt::test::train_batch(m, ids.data(), labels.data(), 3, 9, 0.01);
          const int64_t n = lora ? m.lora_flat_size() : m.flat_size();
          gs[i].resize(static_cast<size_t>(n));
          be.to_host(gs[i].data(), lora ? m.lora_grads_data() : m.grads_data(), gs[i].size() * 4);
        }
        EXPECT_EQ(ls[0].sum, ls[1].sum);
        EXPECT_EQ(gs[0], gs[1]);
        const int64_t sets = checkpointing ? 1 : cfg.num_hidden_layers;
        const auto r64 = [](size_t x) { return (x + 63) / 64 * 64; };
        const size_t pre = r64(27 * 37 * 4), mask = std::string(act) == "relu" ? r64(32 * 4) : 0;
        EXPECT_EQ(a.activation_bytes(3, 9) - b.activation_bytes(3, 9), sets * (pre - mask));
      }
    }
  }
}

TEST(Transformer, ActivationBitsNeedReluOnANonGatedMlp) {
  CpuBackend be;
  ModelConfig gelu = test::tiny("gpt2");
  EXPECT_NE(Transformer::activation_bits_unsupported(gelu).find("relu or relu2"),
            std::string::npos);
  ModelConfig gated = test::tiny("llama");
  gated.hidden_act = "relu2";
  EXPECT_NE(Transformer::activation_bits_unsupported(gated).find("non-gated"), std::string::npos);
  ModelConfig ok = test::tiny("gpt2");
  ok.hidden_act = "relu";
  EXPECT_EQ(Transformer::activation_bits_unsupported(ok), "");
  Transformer m(&be, gated, DType::f32);
  EXPECT_THROW(m.set_activation_bits(1), std::exception);
}

TEST(Transformer, InitIsReproducibleAndScaled) {
  CpuBackend be;
  ModelConfig cfg = tiny_config(false);
  cfg.hidden_size = 64;
  cfg.head_dim = 16;
  cfg.intermediate_size = 96;
  cfg.num_hidden_layers = 8;
  Transformer a(&be, cfg), b(&be, cfg);
  a.init_weights(42);
  b.init_weights(42);
  const auto* wa = static_cast<const float*>(a.params_data());
  const auto* wb = static_cast<const float*>(b.params_data());
  ASSERT_TRUE(std::equal(wa, wa + a.flat_size(), wb));
  auto stddev = [&](const ParamInfo& p) {
    double s = 0;
    for (int64_t i = 0; i < p.numel(); ++i) s += double(wa[p.offset + i]) * wa[p.offset + i];
    return std::sqrt(s / p.numel());
  };
  EXPECT_NEAR(stddev(a.param("model.layers.0.mlp.up_proj.weight")), 0.02, 0.002);
  EXPECT_NEAR(stddev(a.param("model.layers.0.mlp.down_proj.weight")), 0.02 / 4.0, 0.0005);
  EXPECT_EQ(wa[a.param("model.norm.weight").offset], 1.0f);
}

TEST(Transformer, KvCacheMatchesFullForward) {
  CpuBackend be;
  Transformer m(&be, tiny_config(false), DType::f64);
  randomise(m, 21, 0.3);
  const int64_t T = 9;
  auto ids = random_ids(T, 11, 22);
  std::vector<double> full = m.forward_logits(ids.data(), 1, T);
  auto cache = m.make_kv_cache(T);
  std::vector<float> last = m.feed(*cache, ids.data(), 4);  // prefill 4, then one at a time
  for (int64_t t = 4; t <= T; ++t) {
    for (int64_t v = 0; v < 11; ++v)
      EXPECT_NEAR(last[v], full[(t - 1) * 11 + v], 1e-5) << "position " << t - 1;
    if (t < T) last = m.feed(*cache, &ids[t], 1);
  }
}

// A packed row (positions restarting per document, attention kept inside each) computes exactly
// what its documents compute as separate sequences: logits, loss and every gradient, with and
// without activation checkpointing.
TEST(Transformer, PackedRowEqualsSeparateDocuments) {
  for (bool ckpt : {false, true}) {
    CpuBackend be;
    Transformer m(&be, tiny_config(false), DType::f64);
    m.set_activation_checkpointing(ckpt);
    randomise(m, 41, 0.3);
    const int64_t lens[] = {5, 3, 6};  // one row of T = 14 holding three documents
    const int64_t T = 14;
    auto ids = random_ids(T, 11, 42), labels = random_ids(T, 11, 43);
    std::vector<int32_t> pos, start;
    int64_t at = 0;
    for (int64_t len : lens) {
      for (int64_t i = 0; i < len; ++i) {
        pos.push_back(static_cast<int32_t>(i));
        start.push_back(static_cast<int32_t>(at));
      }
      labels[at + len - 1] = Transformer::kIgnoreIndex;  // no label across a boundary
      at += len;
    }
    const Transformer::Packing packing{pos.data(), start.data()};
    std::vector<double> packed = m.forward_logits(ids.data(), 1, T, &packing);
    m.zero_grads();
    LossSum ls = lmt::test::train_batch(m, ids.data(), labels.data(), 1, T, 1.0, &packing);
    std::vector<double> g_packed(static_cast<size_t>(m.flat_size())), g_sep(g_packed.size());
    be.to_host(g_packed.data(), m.grads_data(), g_packed.size() * sizeof(double));

    m.zero_grads();
    double sep_sum = 0;
    at = 0;
    for (int64_t len : lens) {
      std::vector<double> alone = m.forward_logits(&ids[at], 1, len);
      for (int64_t i = 0; i < len * 11; ++i)
        ASSERT_NEAR(packed[at * 11 + i], alone[i], 1e-12) << "token " << at + i / 11;
      sep_sum += lmt::test::train_batch(m, &ids[at], &labels[at], 1, len, 1.0).sum;
      at += len;
    }
    be.to_host(g_sep.data(), m.grads_data(), g_sep.size() * sizeof(double));
    EXPECT_NEAR(ls.sum, sep_sum, 1e-10);
    for (size_t i = 0; i < g_sep.size(); ++i) ASSERT_NEAR(g_packed[i], g_sep[i], 1e-10) << i;
    // And without the packing information the row is one sequence: different logits.
    std::vector<double> plain = m.forward_logits(ids.data(), 1, T);
    EXPECT_GT(std::abs(plain[13 * 11] - packed[13 * 11]), 1e-6);
  }
}

TEST(Transformer, LossDoesNotDependOnMicroBatchSplit) {
  CpuBackend be;
  Transformer m(&be, tiny_config(false), DType::f64);
  randomise(m, 31, 0.2);
  const int64_t B = 4, T = 6;
  auto ids = random_ids(B * T, 11, 32), labels = random_ids(B * T, 11, 33);
  const double scale = 1.0 / (B * T);
  m.zero_grads();
  lmt::test::train_batch(m, ids.data(), labels.data(), B, T, scale);
  std::vector<double> whole(static_cast<size_t>(m.flat_size())), split(whole.size());
  be.to_host(whole.data(), m.grads_data(), whole.size() * 8);
  m.zero_grads();
  lmt::test::train_batch(m, ids.data(), labels.data(), 2, T, scale);
  lmt::test::train_batch(m, ids.data() + 2 * T, labels.data() + 2 * T, 2, T, scale);
  be.to_host(split.data(), m.grads_data(), split.size() * 8);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(whole[i], split[i], 1e-13);
}

TEST(Transformer, RejectsTokenOutsideVocabulary) {
  CpuBackend be;
  Transformer m(&be, tiny_config(false));
  std::vector<int32_t> ids = {1, 2, 11}, labels = {1, 2, 3};
  EXPECT_THROW(batch_loss(m, ids.data(), labels.data(), 1, 3), UserError);
}

}  // namespace
}  // namespace lmt
