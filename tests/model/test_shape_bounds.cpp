// Shapes too large to address are one UserError naming the keys (never an overflowed count), the
// analytic parameter count agrees with the layout for every family, a model larger than the
// memory given is refused before it is built, and a deep model's layout is linear in its size.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace lmt {
namespace {

ModelConfig small(const std::string& family) {
  ModelConfig c = family_defaults(family);
  c.vocab_size = 301;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = family == "gpt2" ? 0 : 2;
  c.head_dim = family == "gpt2" ? 0 : 8;
  c.max_position_embeddings = 32;
  return c;
}

void expect_refused(const ModelConfig& c, const std::string& needle) {
  try {
    c.validate();
    FAIL() << "validate() accepted a shape that should name " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ShapeBounds, ParameterCountMatchesTheLayout) {
  for (const char* f : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2"})
    for (bool tied : {false, true}) {
      ModelConfig c = small(f);
      c.tie_word_embeddings = tied;
      int64_t sum = 0;
      for (const ParamInfo& p : param_layout(c)) sum += p.numel();
      EXPECT_EQ(c.parameter_count(), sum) << f << (tied ? " tied" : "");
    }
}

TEST(ShapeBounds, WidthsLayersAndProductsPastTheBoundsNameTheirKeys) {
  ModelConfig c = small("llama");
  c.vocab_size = int64_t{1} << 62;
  expect_refused(c, "model.vocab_size");
  c = small("llama");
  c.num_hidden_layers = 1000000;
  expect_refused(c, "model.num_hidden_layers");
  c = small("llama");
  c.num_attention_heads = c.num_key_value_heads = int64_t{1} << 40;
  expect_refused(c, "model.num_attention_heads");
  // Each key addressable, the products not: q|k|v and the MLP saturate, the embedding does not.
  c = small("llama");
  c.hidden_size = 2000000000;
  c.intermediate_size = 2000000000;
  c.head_dim = 0;
  expect_refused(c, "more than 2^63 parameters");
  c = small("gpt2");
  c.vocab_size = 2000000000;
  c.hidden_size = 1 << 20;
  c.intermediate_size = 4;
  c.num_attention_heads = 1;
  expect_refused(c, "model.vocab_size x model.hidden_size");
  c = small("llama");
  c.hidden_size = 1 << 16;
  c.num_attention_heads = 1 << 8;
  c.num_key_value_heads = 0;
  c.head_dim = 0;
  c.intermediate_size = 1 << 18;
  c.num_hidden_layers = 1 << 16;  // 2^16 layers of ~2^35.6 parameters
  expect_refused(c, "model.num_hidden_layers x");
}

TEST(ShapeBounds, WeightsLargerThanTheMemoryAreRefusedBeforeTheModel) {
  const ModelConfig c = small("llama");
  const uint64_t bytes = static_cast<uint64_t>(c.parameter_count()) * 4;
  EXPECT_NO_THROW(ModelWeights::check_fits(c, DType::f32, bytes));
  EXPECT_NO_THROW(ModelWeights::check_fits(c, DType::f32, 0));  // unknown: no check
  try {
    ModelWeights::check_fits(c, DType::f32, bytes - 1);
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(c.parameter_count()) + " parameters"), std::string::npos) << m;
    EXPECT_NE(m.find("of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("model.num_hidden_layers"), std::string::npos) << m;
  }
}

TEST(ShapeBounds, ADeepModelsLayoutIsLinearInItsSize) {
  // The bf16 base's staging size walks every layer's range: a pass over all parameters per layer
  // took minutes here.
  ModelConfig c = small("llama");
  c.num_hidden_layers = 20000;
  const auto start = std::chrono::steady_clock::now();
  const size_t bytes = ModelWeights::base_bytes(c, DType::bf16);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(bytes, static_cast<size_t>(c.parameter_count()) * 2);
  EXPECT_LT(s, 2.0);
}

TEST(ShapeBounds, ALoraRankWiderThanTheModelIsRefused) {
  LoraSpec s;
  s.rank = int64_t{1} << 40;
  s.alpha = 16;
  s.target_modules = {"all-linear"};
  try {
    lora_layout(small("llama"), s);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.rank"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmt
