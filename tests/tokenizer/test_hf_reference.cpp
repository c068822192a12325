// tokenizer.json files of every kind we load against Hugging Face tokenizers' own ids (hf_ref.json,
// made by scripts/make_tokenizer_fixtures.py with HF tokenizers): the SentencePiece-style
// ones (Llama 2 normalizer, Metaspace first / always+split / never, Gemma-like Replace with Split
// pre-tokenizers of every behavior), the byte-level ones, and the
// file `lmtrain tokenizer train` wrote. Also bos_id / eos_id of every tokenizer kind, and encoding
// from many threads at once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

namespace lmt {
namespace {

using nlohmann::json;

std::string hf_data_path(const std::string& name) {
  return std::string(LMT_TEST_DATA) + "/tokenizers/" + name;
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string hf_ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

const json& reference() {
  static const json ref = read_json(hf_data_path("hf_ref.json"));
  return ref;
}

class HfReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfReference, IdsSpecialIdsAndDecodeMatch) {
  const std::string name = GetParam();
  const auto texts = reference()["texts"].get<std::vector<std::string>>();
  const json& r = reference()["tokenizers"][name];
  ASSERT_TRUE(r.is_object()) << name << " missing from hf_ref.json";
  const auto ids = r["ids"].get<std::vector<std::vector<int32_t>>>();
  const auto ids_special = r["ids_special"].get<std::vector<std::vector<int32_t>>>();
  const auto decoded = r["decoded"].get<std::vector<std::string>>();
  ASSERT_EQ(ids.size(), texts.size());
  ASSERT_GE(texts.size(), 40u);
  const auto tok = load_tokenizer(hf_data_path(name + ".json"));
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = tok->encode(texts[i]);
    EXPECT_EQ(got, ids[i]) << name << " text " << i << " '" << texts[i] << "'\n expected "
                           << hf_ids_str(ids[i]) << "\n got      " << hf_ids_str(got);
    EXPECT_EQ(tok->encode_with_special(texts[i]), ids_special[i]) << name << " text " << i;
    EXPECT_EQ(tok->decode(ids[i]), decoded[i])
        << name << " text " << i << " " << hf_ids_str(ids[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference,
                         ::testing::Values("llama2_style_bpe", "metaspace_bpe",
                                           "metaspace_split_bpe", "metaspace_never_bpe",
                                           "split_behaviors_bpe", "bytelevel_bpe",
                                           "llama3_style_bpe", "lmtrain_trained_bpe"));

TEST(HfReference, SentencePieceStyleAgreesWithLibSentencePiece) {
  // llama2_style_bpe.json is sp_bpe.model converted as transformers does; on plain text (no
  // normalization differences) both give the same ids.
  const auto hf = load_tokenizer(hf_data_path("llama2_style_bpe.json"));
  const auto sp = load_tokenizer(hf_data_path("sp_bpe.model"));
  for (const char* t :
       {"Hello world!", "The quick brown fox jumps over the lazy dog.", "it's fine"})
    EXPECT_EQ(hf->encode(t), sp->encode(t)) << t;
}

TEST(HfReference, RandomTextsRoundTripThroughByteFallback) {
  // Byte fallback covers every character, so decode(encode(t)) == t for any valid UTF-8 text
  // without "▁" (which decodes to a space) or a special token (the Llama 2 decoder strips the one
  // space the normalizer prepends).
  const auto tok = load_tokenizer(hf_data_path("llama2_style_bpe.json"));
  std::mt19937 rng(std::random_device{}());
  const char32_t pool[] = {U'a',    U'Z',      U' ', U' ', U'\n', U'\t', U'é', U'中',
                           U'🙂', U'\u0301', U'<', U'>', U's',  U'/',  U'0', U'\u00a0'};
  for (int n = 0; n < 200; ++n) {
    std::string t;
    const int len = static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const char32_t c = pool[rng() % std::size(pool)];
      if (c < 0x80) {
        t.push_back(static_cast<char>(c));
      } else if (c < 0x800) {
        t.push_back(static_cast<char>(0xC0 | (c >> 6)));
        t.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      } else if (c < 0x10000) {
        t.push_back(static_cast<char>(0xE0 | (c >> 12)));
        t.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        t.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      } else {
        t.push_back(static_cast<char>(0xF0 | (c >> 18)));
        t.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        t.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        t.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
    }
    const auto ids = tok->encode(t);
    for (int32_t id : ids) ASSERT_NE(id, 0) << "unk in " << hf_ids_str(ids);
    if (t.find("<s>") != std::string::npos || t.find("</s>") != std::string::npos) continue;
    EXPECT_EQ(tok->decode(ids), t) << hf_ids_str(ids);
  }
}

TEST(HfReference, CuttingWordsAtMetaspaceKeepsTheIds) {
  // The loader cuts SentencePiece-style words before each "▁" that follows another character
  // when no vocab token could merge across the cut. A vocab token with an inner "▁" (reachable by
  // no merge, so the ids cannot change) turns the cut off: both must agree on random texts.
  json j = read_json(hf_data_path("llama2_style_bpe.json"));
  j["model"]["vocab"]["q\u2581z"] = 700;
  const std::string path =
      ::testing::TempDir() + "/lmt_no_cut_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << j.dump();
  const auto cut = load_tokenizer(hf_data_path("llama2_style_bpe.json"));
  const auto whole = load_tokenizer(path);
  std::mt19937 rng(std::random_device{}());
  const char* pool[] = {"a", "e",  "t",      "h",  "th", "in", " ",
                        " ", "  ", "\u2581", "\n", "x",  "q",  "z"};
  for (int n = 0; n < 300; ++n) {
    std::string t;
    for (int k = static_cast<int>(rng() % 30); k > 0; --k) t += pool[rng() % std::size(pool)];
    EXPECT_EQ(cut->encode(t), whole->encode(t)) << "'" << t << "'";
  }
  std::remove(path.c_str());

  // A merge that does cross ("e" + "▁", rank 0) must be applied: the cut is off for this vocab.
  json m = read_json(hf_data_path("llama2_style_bpe.json"));
  m["model"]["vocab"]["e\u2581"] = 700;
  m["model"]["merges"].insert(m["model"]["merges"].begin(), json::array({"e", "\u2581"}));
  std::ofstream(path) << m.dump();
  const auto crossing = load_tokenizer(path);
  const auto ids = crossing->encode("the cat");
  EXPECT_NE(std::find(ids.begin(), ids.end(), 700), ids.end()) << hf_ids_str(ids);
  std::remove(path.c_str());
}

TEST(Tokenizer, BosAndEosIds) {
  struct Case {
    const char* spec;
    int32_t bos, eos;
  };
  const Case cases[] = {
      {"bytes", -1, 256},
      {"sp_bpe.model", 1, 2},
      {"llama2_style_bpe.json", 1, 2},     // template "<s> $A"; </s> by name
      {"metaspace_bpe.json", 1, 2},        // template "<s> $A </s>"
      {"metaspace_split_bpe.json", 1, 2},  // no template: <s>; </s> comes before <eos>
      {"bytelevel_bpe.json", -1, 0},       // <|endoftext|>
      {"llama3_style_bpe.json", 0, 1},     // <|begin_of_text|>, <|end_of_text|>
      {"lmtrain_trained_bpe.json", -1, 999},
  };
  for (const Case& c : cases) {
    const std::string spec = std::string(c.spec) == "bytes" ? "bytes" : hf_data_path(c.spec);
    const auto tok = load_tokenizer(spec);
    EXPECT_EQ(tok->bos_id(), c.bos) << c.spec;
    EXPECT_EQ(tok->eos_id(), c.eos) << c.spec;
  }
  const auto uni = load_tokenizer(hf_data_path("sp_unigram.model"));
  EXPECT_LT(uni->eos_id(), uni->vocab_size());
}

TEST(Tokenizer, EncodesTheSameFromManyThreads) {
  // Each thread has its own word cache: many threads encoding at once give the ids one thread does.
  const auto texts = reference()["texts"].get<std::vector<std::string>>();
  for (const char* name : {"bytelevel_bpe.json", "llama2_style_bpe.json"}) {
    const auto tok = load_tokenizer(hf_data_path(name));
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok->encode(t));
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int w = 0; w < 4; ++w)
      threads.emplace_back([&, w] {
        for (int rep = 0; rep < 20; ++rep)
          for (size_t i = 0; i < texts.size(); ++i)
            if (tok->encode(texts[(i + w) % texts.size()]) != expected[(i + w) % texts.size()])
              ++failures[w];
      });
    for (auto& th : threads) th.join();
    for (int w = 0; w < 4; ++w) EXPECT_EQ(failures[w], 0) << name << " thread " << w;
  }
}

}  // namespace
}  // namespace lmt
