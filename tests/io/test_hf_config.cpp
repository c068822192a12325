// config.json <-> ModelConfig: a round trip keeps every field; bad input names the file and key.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/hf_config.h"

namespace lmt {
namespace {

TEST(HfConfig, RoundTripKeepsEveryField) {
  ModelConfig c;
  c.vocab_size = 257;
  c.hidden_size = 96;
  c.intermediate_size = 200;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 512;
  c.rope_theta = 5e5;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.initializer_range = 0.01;
  c.eos_token_id = 256;
  nlohmann::json j = model_config_to_hf(c);
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["head_dim"], 16);  // resolved from hidden_size / heads
  EXPECT_FALSE(j.contains("bos_token_id"));
  EXPECT_FALSE(j.contains("family"));
  ModelConfig back = model_config_from_hf(j, "config.json");
  EXPECT_EQ(nlohmann::json(model_config_to_hf(back)), j);
  EXPECT_EQ(back.vocab_size, 257);
  EXPECT_EQ(back.rope_theta, 5e5);
  EXPECT_TRUE(back.tie_word_embeddings);
  EXPECT_EQ(back.bos_token_id, -1);
  EXPECT_EQ(back.eos_token_id, 256);
}

TEST(HfConfig, ErrorsNameFileAndKey) {
  nlohmann::json j = model_config_to_hf(ModelConfig{});
  j["hidden_size"] = "wide";
  try {
    model_config_from_hf(j, "m/config.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("m/config.json: key 'hidden_size'"), std::string::npos)
        << e.what();
  }
  j = model_config_to_hf(ModelConfig{});
  j["model_type"] = "mamba";
  EXPECT_THROW(model_config_from_hf(j, "m/config.json"), UserError);
  j = model_config_to_hf(ModelConfig{});
  j["model_type"] = true;  // found by fuzz_hf_config: json's type_error, not a UserError
  EXPECT_THROW(model_config_from_hf(j, "m/config.json"), UserError);
  EXPECT_FALSE(is_multimodal_gemma3(j));
  j = model_config_to_hf(ModelConfig{});
  j["eos_token_id"] = {128001, 128008};  // lists are left for the tokenizer to interpret
  EXPECT_EQ(model_config_from_hf(j, "m/config.json").eos_token_id, -1);
}

}  // namespace
}  // namespace lmt
