// Helpers of the export tests: tiny models of every family that this build can export, their
// parameters as host vectors, and JSON files.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "io/io_test_util.h"  // temp_dir(), expect_user_error()
#include "model/transformer.h"

namespace lmt::test {

inline const char* const kAllFamilies[] = {"llama", "mistral", "qwen2",  "qwen3",
                                           "gemma", "gemma2",  "gemma3", "gpt2"};

// A small model of `family` with odd sizes: vocab 97, hidden 48, 4 heads of 12, 2 kv heads
// (gpt2: 4), MLP 80, 2 layers, BOS 1 and EOS 2.
inline ModelConfig tiny_config(const std::string& family) {
  ModelConfig c = family_defaults(family);
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = family == "gpt2" ? 0 : 2;
  c.head_dim = 12;
  c.max_position_embeddings = 64;
  if (c.sliding_window > 0) c.sliding_window = 5;
  if (c.query_pre_attn_scalar > 0) c.query_pre_attn_scalar = 12;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

// The families whose config.json this build writes and reads back (every family once all are
// implemented; llama, mistral and qwen2 before). Tests loop over these and name the others.
inline std::vector<std::string> exportable_families() {
  std::vector<std::string> out, skipped;
  for (const char* f : kAllFamilies) {
    try {
      model_config_from_hf(model_config_to_hf(tiny_config(f)), "config.json");
      out.push_back(f);
    } catch (const UserError&) {
      skipped.push_back(f);
    }
  }
  static bool said = false;
  if (!said && !skipped.empty()) {
    std::string s;
    for (const auto& f : skipped) s += " " + f;
    std::printf("[ note ] not exportable in this build (config.json does not read back):%s\n",
                s.c_str());
    said = true;
  }
  return out;
}

inline uint64_t random_seed() {
  return std::random_device{}();
}

// The model's parameters as f32 host values, by name.
inline std::vector<float> param_values(const Transformer& m, const ParamInfo& p) {
  std::vector<float> v(static_cast<size_t>(p.numel()));
  m.backend()->to_host(v.data(), static_cast<const float*>(m.params_data()) + p.offset,
                       v.size() * sizeof(float));
  return v;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto d = temp_dir() / name;
  std::filesystem::remove_all(d);
  return d;
}

// Files of a directory, sorted.
inline std::vector<std::string> list_dir(const std::filesystem::path& d) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace lmt::test
