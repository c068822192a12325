// LoRA adapter layout and set-up: PEFT's names and shapes per family, target matching as PEFT
// does it (a name or a '.'-separated suffix), PEFT's initialisation, one clear message for a bad
// spec, and generation through the KV cache with adapters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "model_test_util.h"
#include "model_passes.h"

namespace lmt {
namespace {

ModelConfig small(const std::string& family) {
  ModelConfig c = family_defaults(family);
  c.vocab_size = 13;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = family == "gpt2" ? 0 : 2;
  c.max_position_embeddings = 32;
  return c;
}

LoraSpec spec(std::vector<std::string> targets, int64_t rank = 4) {
  LoraSpec s;
  s.rank = rank;
  s.alpha = 8;
  s.target_modules = std::move(targets);
  return s;
}

std::vector<std::string> names(const LoraLayout& l) {
  std::vector<std::string> out;
  for (const ParamInfo& p : l.params) out.push_back(p.name);
  return out;
}

TEST(Lora, PeftNamesAndShapes) {
  const LoraLayout l = lora_layout(small("llama"), spec({"q_proj", "v_proj", "down_proj"}));
  ASSERT_EQ(l.params.size(), 12u);
  EXPECT_EQ(l.params[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(l.params[0].shape, Shape({4, 16}));
  EXPECT_EQ(l.params[1].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(l.params[1].shape, Shape({16, 4}));
  EXPECT_EQ(l.params[3].name, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(l.params[3].shape, Shape({8, 4}));  // 2 kv heads of 4
  EXPECT_EQ(l.params[4].shape, Shape({4, 24}));  // down_proj's A reads the MLP width
  EXPECT_EQ(l.params[11].name, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  EXPECT_EQ(l.targets[1].module.out_offset, 16 + 8);  // v's slice of q|k|v
  for (const ParamInfo& p : l.params) EXPECT_EQ(p.offset % 64, 0) << p.name;
  EXPECT_EQ(lora_layout(small("qwen3"), spec({"all-linear"})).params.size(), 28u);
}

TEST(Lora, TargetsMatchAsPeftDoes) {
  // gpt2: "c_proj" is the attention's and the MLP's output projection; "attn.c_proj" only one.
  const ModelConfig g = small("gpt2");
  EXPECT_EQ(names(lora_layout(g, spec({"c_proj"}))).size(), 8u);
  const auto attn = names(lora_layout(g, spec({"attn.c_proj"})));
  ASSERT_EQ(attn.size(), 4u);
  EXPECT_EQ(attn[0], "base_model.model.transformer.h.0.attn.c_proj.lora_A.weight");
  EXPECT_EQ(names(lora_layout(g, spec({"c_attn", "c_fc"}))).size(), 8u);
  EXPECT_EQ(names(lora_layout(small("gemma3"), spec({"self_attn.o_proj"}))).size(), 4u);
  // "proj" is not a module name, and "_proj" is no '.'-separated suffix.
  for (const char* bad : {"proj", "_proj", "c_attn"}) {
    try {
      lora_layout(small("llama"), spec({"q_proj", bad}));
      ADD_FAILURE() << bad;
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("lora.target_modules: '") + bad +
                    "' is not a projection of a llama model (it has self_attn.q_proj, "
                    "self_attn.k_proj, self_attn.v_proj, self_attn.o_proj, mlp.gate_proj, "
                    "mlp.up_proj, mlp.down_proj, or all-linear)");
    }
  }
  auto message = [](const LoraSpec& s) -> std::string {
    try {
      lora_layout(small("llama"), s);
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message(spec({"q_proj"}, 0)), "lora.rank must be > 0 (got 0)");
  EXPECT_EQ(message(spec({"q_proj"}, -3)), "lora.rank must be > 0 (got -3)");
  EXPECT_EQ(message(spec({})),
            "lora.target_modules is empty: name the projections to adapt, or all-linear");
  LoraSpec a = spec({"q_proj"});
  a.alpha = 0;
  EXPECT_EQ(message(a), "lora.alpha must be a finite number > 0");
}

// modules_to_save: PEFT's plain suffix test ("norm" takes every norm), copies with PEFT's names
// and the base's kinds after the adapters; a projection, a name matching nothing, and a table
// tied to the head are one message each.
TEST(Lora, ModulesToSaveMatchAsPeftDoes) {
  auto saved = [](const ModelConfig& c, std::vector<std::string> modules) {
    LoraSpec s = spec({"q_proj"});
    if (c.traits().conv1d) s.target_modules = {"c_attn"};
    s.modules_to_save = std::move(modules);
    const LoraLayout l = lora_layout(c, s);
    std::vector<std::string> out;
    for (const SavedParam& p : l.saved) {
      const ParamInfo& info = l.params[static_cast<size_t>(p.index)];
      EXPECT_EQ(info.name, "base_model.model." + p.base_name);
      EXPECT_GT(p.index, l.targets.back().b);
      out.push_back(p.base_name);
    }
    return out;
  };
  ModelConfig q = small("qwen3");
  q.num_hidden_layers = 1;
  EXPECT_EQ(saved(q, {"norm"}),
            (std::vector<std::string>{"model.layers.0.input_layernorm.weight",
                                      "model.layers.0.self_attn.q_norm.weight",
                                      "model.layers.0.self_attn.k_norm.weight",
                                      "model.layers.0.post_attention_layernorm.weight",
                                      "model.norm.weight"}));
  EXPECT_EQ(saved(q, {"model.norm"}), std::vector<std::string>{"model.norm.weight"});
  ModelConfig g = small("gpt2");
  g.num_hidden_layers = 1;
  EXPECT_EQ(saved(g, {"ln_f", "wpe"}),
            (std::vector<std::string>{"transformer.wpe.weight", "transformer.ln_f.weight",
                                      "transformer.ln_f.bias"}));
  ModelConfig u = small("llama");
  u.tie_word_embeddings = false;
  EXPECT_EQ(saved(u, {"lm_head", "embed_tokens"}),
            (std::vector<std::string>{"model.embed_tokens.weight", "lm_head.weight"}));
  auto message = [&](const ModelConfig& c, std::vector<std::string> modules) -> std::string {
    try {
      saved(c, std::move(modules));
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message(u, {"down_proj"}),
            "lora.modules_to_save: 'down_proj' matches model.layers.0.mlp.down_proj, a "
            "projection: adapt it with lora.target_modules (modules_to_save trains norms, and the "
            "embeddings and head of an untied model)");
  EXPECT_EQ(message(u, {"nrm"}),
            "lora.modules_to_save: 'nrm' matches no module of a llama model (norms, for example "
            "input_layernorm or norm; gpt2: ln_1, ln_2, ln_f; an untied model's embeddings and "
            "lm_head)");
  ModelConfig tied = small("gemma3");
  ASSERT_TRUE(tied.tie_word_embeddings);
  EXPECT_EQ(message(tied, {"lm_head"}),
            "lora.modules_to_save: 'lm_head' matches no module of a gemma3 model (its head is "
            "the token embedding: tie_word_embeddings)");
  EXPECT_EQ(message(tied, {"embed_tokens"}),
            "lora.modules_to_save: 'embed_tokens' matches model.embed_tokens, which this model "
            "ties to its output head (tie_word_embeddings); lmtrain does not untie it to train it "
            "beside adapters");
}

TEST(Lora, ScalingIsPeftsAndRsLora) {
  LoraSpec s = spec({"q_proj"}, 16);
  s.alpha = 32;
  EXPECT_EQ(s.scaling(), 2.0);
  s.use_rslora = true;
  EXPECT_EQ(s.scaling(), 8.0);
}

// A uniform in +-1/sqrt(in) (PEFT's kaiming_uniform_ with a = sqrt(5)), B zero, reproducible.
TEST(Lora, InitialisesAsPeft) {
  CpuBackend be;
  Transformer m(&be, small("llama"), DType::f64);
  m.add_lora(spec({"all-linear"}), 7);
  const auto* w = static_cast<const double*>(m.lora_data());
  for (const ParamInfo& p : m.lora_params()) {
    const bool a = p.name.find(".lora_A.") != std::string::npos;
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));
    double lo = 0, hi = 0, sum = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double x = w[p.offset + i];
      lo = std::min(lo, x), hi = std::max(hi, x), sum += x * x;
    }
    if (a) {
      EXPECT_GE(lo, -bound) << p.name;
      EXPECT_LE(hi, bound) << p.name;
      EXPECT_GT(hi - lo, bound) << p.name;  // spread over the range
      // Variance of U(-b, b) is b^2 / 3.
      EXPECT_NEAR(sum / static_cast<double>(p.numel()), bound * bound / 3, bound * bound / 6);
    } else {
      EXPECT_EQ(sum, 0.0) << p.name;
    }
  }
  Transformer again(&be, small("llama"), DType::f64);
  again.add_lora(spec({"all-linear"}), 7);
  EXPECT_EQ(std::memcmp(again.lora_data(), m.lora_data(), m.lora_flat_size() * 8), 0);
}

// Generation (KV cache, one token at a time) goes through the adapters as the full forward does.
TEST(Lora, KvCacheMatchesFullForwardWithAdapters) {
  for (const char* family : {"llama", "gemma3", "gpt2"}) {
    SCOPED_TRACE(family);
    CpuBackend be;
    Transformer m(&be, small(family), DType::f64);
    test::randomise(m, 3, 0.2);
    m.add_lora(spec({"all-linear"}), 4);
    std::vector<double> lw(static_cast<size_t>(m.lora_flat_size()));
    fill_normal(lw.data(), m.lora_flat_size(), 0.0, 0.2, 5, 0);
    be.from_host(m.lora_data(), lw.data(), lw.size() * sizeof(double));
    const int64_t T = 7, V = 13;
    const auto ids = test::random_ids(T, V, 6);
    const std::vector<double> full = m.forward_logits(ids.data(), 1, T);
    auto cache = m.make_kv_cache(T);
    std::vector<float> last = m.feed(*cache, ids.data(), 3);
    for (int64_t t = 3; t <= T; ++t) {
      for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(last[v], full[(t - 1) * V + v], 1e-5);
      if (t < T) last = m.feed(*cache, &ids[t], 1);
    }
  }
}

// clone() carries everything a model computes with: weights, adapters (and saved modules), a bf16
// base and its f32 copies of the kept tensors. The copy's logits are the original's, bit for bit.
TEST(Lora, CloneComputesExactlyWhatTheOriginalDoes) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 base" : "f32 base");
    CpuBackend be, other;
    Transformer m(&be, small("gemma3"), DType::f32);
    std::vector<float> w(static_cast<size_t>(m.flat_size()));  // norms too: not bf16 values
    fill_normal(w.data(), m.flat_size(), 0.0, 0.2, 3, 0);
    be.from_host(m.params_data(), w.data(), w.size() * sizeof(float));
    LoraSpec ls = spec({"all-linear"});
    ls.modules_to_save = {"post_attention_layernorm"};
    m.add_lora(ls, 4);
    std::vector<float> lw(static_cast<size_t>(m.lora_flat_size()));
    fill_normal(lw.data(), m.lora_flat_size(), 0.0, 0.2, 5, 0);
    be.from_host(m.lora_data(), lw.data(), lw.size() * sizeof(float));
    if (bf16) m.set_base_dtype(DType::bf16, 5);
    const std::unique_ptr<Transformer> c = m.clone(&other);
    EXPECT_EQ(c->backend(), &other);
    const auto ids = test::random_ids(9, 13, 6);
    EXPECT_EQ(c->forward_logits(ids.data(), 1, 9), m.forward_logits(ids.data(), 1, 9));
  }
}

// lora.base_dtype bf16: the model computes what an f32 model holding the same bf16-rounded
// weights computes (logits, loss, adapter gradients, generation), with the head converted a few
// rows at a time; and the base takes about half the bytes on a real shape.
TEST(Lora, Bf16BaseComputesWhatAnF32BaseOfTheSameWeightsDoes) {
  for (const char* family : {"llama", "llama_untied", "gemma3", "gpt2", "qwen2"}) {
    SCOPED_TRACE(family);
    const std::string name = family;
    ModelConfig c = small(name == "llama_untied" ? "llama" : name);
    if (name == "llama_untied") c.tie_word_embeddings = false;
    CpuBackend be;
    int64_t flat = 0;
    const std::vector<ParamInfo> params = param_layout(c, &flat);
    std::vector<double> wd(static_cast<size_t>(flat));
    fill_normal(wd.data(), flat, 0.0, 0.3, 21, 0);
    for (const ParamInfo& p : params)
      if (p.kind == ParamKind::norm)
        for (int64_t i = 0; i < p.numel(); ++i) wd[p.offset + i] += c.traits().norm_offset ? 0 : 1;
    std::vector<float> w(wd.begin(), wd.end());
    std::vector<uint16_t> half(w.size());
    be.convert(DType::bf16, half.data(), DType::f32, w.data(), flat);
    be.convert(DType::f32, w.data(), DType::bf16, half.data(), flat);  // bf16-rounded weights
    auto make = [&](bool bf16) {
      auto m = std::make_unique<Transformer>(&be, c);
      be.from_host(m->params_data(), w.data(), w.size() * sizeof(float));
      LoraSpec ls = spec({"all-linear"});  // saved modules are read from the adapter buffer
      ls.modules_to_save = name == "gpt2"           ? std::vector<std::string>{"ln_1", "wpe"}
                           : name == "llama_untied" ? std::vector<std::string>{"lm_head", "embed_tokens"}
                                                    : std::vector<std::string>{"input_layernorm"};
      m->add_lora(ls, 4);
      std::vector<float> lw(static_cast<size_t>(m->lora_flat_size()));
      fill_normal(lw.data(), m->lora_flat_size(), 0.0, 0.2, 22, 0);
      be.from_host(m->lora_data(), lw.data(), lw.size() * sizeof(float));
      if (bf16) m->set_base_dtype(DType::bf16, 5);  // the head's 13 rows in blocks of 5, 5, 3
      return m;
    };
    auto f32 = make(false), bf = make(true);
    EXPECT_EQ(bf->base_dtype(), DType::bf16);
    const int64_t B = 2, T = 7, V = c.vocab_size;
    const auto ids = test::random_ids(B * T, V, 23), labels = test::random_ids(B * T, V, 24);
    const std::vector<double> want = f32->forward_logits(ids.data(), B, T);
    const std::vector<double> got = bf->forward_logits(ids.data(), B, T);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
    f32->zero_grads();
    bf->zero_grads();
    const LossSum lw = lmt::test::train_batch(*f32, ids.data(), labels.data(), B, T, 1.0);
    const LossSum lb = lmt::test::train_batch(*bf, ids.data(), labels.data(), B, T, 1.0);
    EXPECT_NEAR(lb.sum, lw.sum, 1e-5 * std::abs(lw.sum));
    std::vector<float> gw(static_cast<size_t>(f32->lora_flat_size())), gb(gw.size());
    be.to_host(gw.data(), f32->lora_grads_data(), gw.size() * sizeof(float));
    be.to_host(gb.data(), bf->lora_grads_data(), gb.size() * sizeof(float));
    double scale = 0;
    for (float g : gw) scale = std::max(scale, std::abs(double{g}));
    ASSERT_GT(scale, 0);
    for (size_t i = 0; i < gw.size(); ++i) ASSERT_NEAR(gb[i], gw[i], 1e-5 * scale) << i;
    auto cache = bf->make_kv_cache(T);
    const std::vector<float> last = bf->feed(*cache, ids.data(), T);
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(last[v], want[(T - 1) * V + v], 1e-5);
  }
  ModelConfig g = family_defaults("gemma3");  // Gemma 3 270M's sizes
  g.vocab_size = 262144, g.hidden_size = 640, g.intermediate_size = 2048;
  g.num_hidden_layers = 18, g.num_attention_heads = 4, g.num_key_value_heads = 1, g.head_dim = 256;
  const double ratio = static_cast<double>(ModelWeights::base_bytes(g, DType::bf16)) /
                       static_cast<double>(ModelWeights::base_bytes(g, DType::f32));
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.53);
}

}  // namespace
}  // namespace lmt
