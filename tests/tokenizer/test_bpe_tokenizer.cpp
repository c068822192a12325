// BpeTokenizer against ids made by Hugging Face tokenizers 0.23 (tests/data/tokenizers), round
// trips on hard texts, added tokens, load errors, thread safety, and an encode throughput figure.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/regex_split.h"

namespace lmt {
namespace {

using nlohmann::json;

std::string data_path(const std::string& name) {
  return std::string(LMT_TEST_DATA) + "/tokenizers/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("lmt_bpe_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string p = temp_path(name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

const char* kFixtures[] = {"bytelevel_bpe", "llama3_style_bpe"};

std::vector<std::string> hard_texts() {
  return {"",
          "🙂👍🏽 family: 👨‍👩‍👧‍👦",
          "中文字符，日本語のテキスト、한국어",
          "mixed Ελληνικά русский العربية हिन्दी",
          "digits 1234567 and 3.14159 and 1,000,000",
          "DON'T WON'T I'M YOU'LL SHE'D WE'VE THEY'RE it's",
          "line\r\nnext\r\n\r\n",
          "many     spaces   here",
          "\ttabs\t\tand\tmore\t",
          "trailing spaces   ",
          "   leading",
          "\n\n\n",
          " ",
          "a\u00a0non-breaking\u2003em space",
          std::string("invalid \xff\xfe utf-8 \xc3 and \xe2\x82", 26),
          std::string("nul\0byte", 8),
          "<|endoftext|> in text <|end_of_text|><|begin_of_text|>"};
}

TEST(BpeTokenizer, MatchesHuggingFaceIds) {
  const json ref = json::parse(read_file(data_path("ref_ids.json")));
  const auto texts = ref["texts"].get<std::vector<std::string>>();
  ASSERT_FALSE(texts.empty());
  for (const char* name : kFixtures) {
    const BpeTokenizer tok = BpeTokenizer::load(data_path(std::string(name) + ".json"));
    const auto expected = ref[name].get<std::vector<std::vector<int32_t>>>();
    ASSERT_EQ(expected.size(), texts.size()) << name;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto got = tok.encode(texts[i]);
      EXPECT_EQ(got, expected[i]) << name << " text " << i << " '" << texts[i] << "'\n expected "
                                  << ids_str(expected[i]) << "\n got      " << ids_str(got);
    }
  }
}

TEST(BpeTokenizer, RoundTripsBytes) {
  const json ref = json::parse(read_file(data_path("ref_ids.json")));
  auto texts = hard_texts();
  for (const auto& t : ref["texts"]) texts.push_back(t.get<std::string>());
  for (const char* name : kFixtures) {
    const BpeTokenizer tok = BpeTokenizer::load(data_path(std::string(name) + ".json"));
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto ids = tok.encode(texts[i]);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << name << " " << i;
      EXPECT_EQ(tok.decode(ids), texts[i]) << name << " text " << i << " ids " << ids_str(ids);
    }
  }
}

TEST(BpeTokenizer, LongRunsRoundTrip) {
  // One pre-token of 200k bytes each: the regexes must not run out of JIT stack and the merge
  // loop must not be quadratic. At most one id per byte: this small vocab has no "77" or "!!".
  const std::vector<std::string> runs = {
      std::string(200000, 'a'), std::string(200000, ' '),  std::string(200000, '7'),
      std::string(200000, '!'), std::string(200000, '\n'), "x" + std::string(200000, ' ') + "y"};
  for (const char* name : kFixtures) {
    const BpeTokenizer tok = BpeTokenizer::load(data_path(std::string(name) + ".json"));
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto ids = tok.encode(runs[i]);
      EXPECT_LE(ids.size(), runs[i].size()) << name << " run " << i;
      EXPECT_EQ(tok.decode(ids), runs[i]) << name << " run " << i;
    }
  }
}

TEST(BpeTokenizer, PiecesEncodeIndependently) {
  // The pre-tokenizer never joins a space-prefixed word with the text before it, so encoding a
  // text in two pieces split before " world" gives the concatenation.
  const BpeTokenizer tok = BpeTokenizer::load(data_path("bytelevel_bpe.json"));
  auto a = tok.encode("Hello"), b = tok.encode(" world!");
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(tok.encode("Hello world!"), a);
}

TEST(BpeTokenizer, AddedTokensInTextAreSingleIds) {
  const BpeTokenizer tok = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  ASSERT_EQ(tok.token_to_id("<|end_of_text|>"), 1);
  ASSERT_EQ(tok.token_to_id("<|begin_of_text|>"), 0);
  EXPECT_EQ(tok.encode("<|begin_of_text|><|end_of_text|>"), (std::vector<int32_t>{0, 1}));

  auto expected = tok.encode("Hello world");
  expected.push_back(1);
  const auto tail = tok.encode(" next");
  expected.insert(expected.end(), tail.begin(), tail.end());
  EXPECT_EQ(tok.encode("Hello world<|end_of_text|> next"), expected);
  EXPECT_EQ(tok.decode({1}), "<|end_of_text|>");
  EXPECT_EQ(tok.id_to_token(1), "<|end_of_text|>");
  // A near miss is ordinary text, and no id 0/1 appears in it.
  for (int32_t id : tok.encode("<|end_of_text| >")) EXPECT_GT(id, 1);

  const BpeTokenizer gpt2 = BpeTokenizer::load(data_path("bytelevel_bpe.json"));
  const auto ids = gpt2.encode("a<|endoftext|>b");
  ASSERT_EQ(ids.size(), 3u) << ids_str(ids);
  EXPECT_EQ(ids[1], 0);
}

TEST(BpeTokenizer, AddedTokensRawBeforeNormalized) {
  // HF matches the normalized=false tokens first, then the normalized=true ones in the gaps, so
  // "<a>" (normalized) loses to the later-starting "a><b>" (not normalized) in "<a><b>".
  json j = json::parse(read_file(data_path("llama3_style_bpe.json")));
  j["added_tokens"].push_back({{"id", 900},
                               {"content", "<a>"},
                               {"special", false},
                               {"normalized", true},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false}});
  j["added_tokens"].push_back({{"id", 901},
                               {"content", "a><b>"},
                               {"special", true},
                               {"normalized", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false}});
  const BpeTokenizer tok = BpeTokenizer::load(write_temp("twopass.json", j.dump()));
  EXPECT_EQ(tok.vocab_size(), 902);
  auto expected = tok.encode("<");
  expected.push_back(901);
  EXPECT_EQ(tok.encode("<a><b>"), expected);
  EXPECT_EQ(tok.encode("x<a>"), (std::vector<int32_t>{*tok.token_to_id("x"), 900}));
  EXPECT_EQ(tok.decode(tok.encode("<a><b><a>")), "<a><b><a>");

  // HF's decode(skip_special_tokens=True) leaves out the added tokens marked special only.
  const auto any = load_tokenizer(write_temp("twopass_any.json", j.dump()));
  EXPECT_TRUE(any->is_special(0));
  EXPECT_TRUE(any->is_special(1));
  EXPECT_TRUE(any->is_special(901));
  EXPECT_FALSE(any->is_special(900));
  std::vector<int32_t> ids = {0};
  for (int32_t id : tok.encode("Hi there")) {
    EXPECT_FALSE(any->is_special(id));
    ids.push_back(id);
  }
  ids.insert(ids.end(), {900, 901, 1});
  EXPECT_EQ(any->decode(ids), "<|begin_of_text|>Hi there<a>a><b><|end_of_text|>");
  EXPECT_EQ(any->decode_skipping_special(ids), "Hi there<a>");
}

TEST(BpeTokenizer, VocabSizeAndLookups) {
  const BpeTokenizer tok = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  EXPECT_EQ(tok.vocab_size(), 900);
  EXPECT_FALSE(tok.token_to_id("definitely-not-a-token").has_value());
  const int32_t space = *tok.token_to_id("\xc4\xa0");  // "Ġ", the byte-level space
  EXPECT_EQ(tok.decode({space}), " ");
  EXPECT_THROW(tok.decode({tok.vocab_size()}), UserError);
  EXPECT_THROW(tok.decode({-1}), UserError);
  EXPECT_THROW(tok.id_to_token(100000), UserError);
}

TEST(BpeTokenizer, EncodeIsThreadSafe) {
  const BpeTokenizer tok = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  const std::string text = read_file(data_path("train.txt")).substr(0, 100000);
  const BpeTokenizer fresh = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  const auto expected = fresh.encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { got[i] = tok.encode(text); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    BpeTokenizer::load(path);
    FAIL() << "no error for " << path;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

std::string edited_fixture(const std::string& name, void (*edit)(json&)) {
  json j = json::parse(read_file(data_path("llama3_style_bpe.json")));
  edit(j);
  return write_temp(name, j.dump());
}

TEST(BpeTokenizer, LoadErrorsNameTheFileAndField) {
  expect_load_error(temp_path("missing.json"), "cannot open");
  expect_load_error(write_temp("malformed.json", "{\"model\": {\"type\": \"BPE\", "),
                    "not valid JSON");
  expect_load_error(
      edited_fixture("wordpiece.json", [](json& j) { j["model"]["type"] = "WordPiece"; }),
      "model.type");
  expect_load_error(edited_fixture("nfc.json",
                                   [](json& j) {
                                     j["normalizer"] = {{"type", "NFC"}};
                                   }),
                    "normalizer");
  expect_load_error(
      edited_fixture("whitespace.json",
                     [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace"; }),
      "pre_tokenizer.pretokenizers[0].type");
  expect_load_error(
      edited_fixture(
          "badregex.json",
          [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }),
      "pattern");
  expect_load_error(edited_fixture("badmerge.json",
                                   [](json& j) {
                                     j["model"]["merges"][0] = {"zzz", "qqq"};
                                   }),
                    "model.merges[0]");
  expect_load_error(
      edited_fixture("single_word.json",
                     [](json& j) { j["added_tokens"][0]["single_word"] = true; }),
      "added_tokens[0].single_word");
  expect_load_error(edited_fixture("nomodel.json", [](json& j) { j.erase("model"); }), "model");
}

// Found by the tokenizer.json fuzz test: 20000 nested Sequence normalizers made the recursive
// reader build gigabytes of field names (bad_alloc), 200000 ran it out of stack; and an empty
// Metaspace decoder replacement made decode loop, growing its output until memory ran out.
TEST(BpeTokenizer, DeepNestingAndEmptyDecoderReplacementAreRefused) {
  auto nested = [](int depth) {
    json j = json::parse(read_file(data_path("llama3_style_bpe.json")));
    j["normalizer"] = "@@nested@@";
    std::string text = j.dump(), deep;
    for (int i = 0; i < depth; ++i) deep += R"({"type":"Sequence","normalizers":[)";
    deep += R"({"type":"Prepend","prepend":"x"})";
    for (int i = 0; i < depth; ++i) deep += "]}";
    return text.replace(text.find("\"@@nested@@\""), 12, deep);
  };
  EXPECT_NO_THROW(BpeTokenizer::load(write_temp("nested60.json", nested(60))));
  expect_load_error(write_temp("nested64.json", nested(64)), "(nesting): deeper than 128 levels");
  expect_load_error(write_temp("nested200k.json", nested(200000)), "(nesting)");
  expect_load_error(edited_fixture("metaspace_decoder.json",
                                   [](json& j) {
                                     j["decoder"] = {{"type", "Metaspace"}, {"replacement", ""}};
                                   }),
                    "decoder.replacement: empty");
}

// Strip's start and stop were read with get<int>, which is undefined behaviour for a float out of
// int's range (1e10); they are counts, as HF's usize, and anything else is refused.
TEST(BpeTokenizer, StripCountsAreIntegersAtLeastZero) {
  auto strip = [](json start) {
    json j = json::parse(read_file(data_path("llama2_style_bpe.json")));
    j["decoder"]["decoders"][3]["start"] = start;
    return j.dump();
  };
  for (const json& bad : {json(1e10), json(-1), json(1.5), json("1"), json(nullptr)})
    expect_load_error(write_temp("strip.json", strip(bad)), "decoder.decoders[3].start: expected");
  const BpeTokenizer huge =
      BpeTokenizer::load(write_temp("strip_huge.json", strip(uint64_t{1} << 40)));
  EXPECT_EQ(huge.decode(huge.encode("  a b")), "a b");
}

TEST(BpeTokenizer, SplitOnLiteralString) {
  // The Split pattern {"String": ...} is a literal: "l." must not match "ll" as a regex would.
  const BpeTokenizer plain = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  json j = json::parse(read_file(data_path("llama3_style_bpe.json")));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "l."}};
  const BpeTokenizer tok = BpeTokenizer::load(write_temp("literal.json", j.dump()));
  std::vector<int32_t> split_ids;
  for (const char* piece : {"He", "ll", "o"}) {
    const auto ids = plain.encode(piece);
    split_ids.insert(split_ids.end(), ids.begin(), ids.end());
  }
  ASSERT_NE(plain.encode("Hello"), split_ids) << "fixture cannot tell the two apart";
  EXPECT_EQ(tok.encode("Hello"), plain.encode("Hello"));
  // And the literal itself does split: "al.b" -> "a" | "l." | "b".
  std::vector<int32_t> expected;
  for (const char* piece : {"a", "l.", "b"}) {
    const auto ids = tok.encode(piece);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(tok.encode("al.b"), expected);
  EXPECT_EQ(tok.decode(tok.encode("a\\E.l.\\Q")), "a\\E.l.\\Q");
}

TEST(BpeTokenizer, ARegexLimitNamesTheTokenizerAndIsATokenizeError) {
  // A pattern that backtracks exponentially: PCRE2 stops it at its match limit.
  json j = json::parse(read_file(data_path("llama3_style_bpe.json")));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a|aa)+$"}};
  const std::string path = write_temp("backtracking.json", j.dump());
  const BpeTokenizer tok = BpeTokenizer::load(path);
  try {
    tok.encode(std::string(200, 'a') + "b");
    FAIL() << "no error";
  } catch (const TokenizeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("pre_tokenizer"), std::string::npos) << m;
    EXPECT_NE(m.find("limit"), std::string::npos) << m;
  }
}

TEST(BpeTokenizer, AddPrefixSpace) {
  json j = json::parse(read_file(data_path("bytelevel_bpe.json")));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  const BpeTokenizer with = BpeTokenizer::load(write_temp("prefix.json", j.dump()));
  const BpeTokenizer without = BpeTokenizer::load(data_path("bytelevel_bpe.json"));
  EXPECT_EQ(with.encode("Hello world"), without.encode(" Hello world"));
  EXPECT_EQ(with.encode(" Hello"), without.encode(" Hello"));
}

TEST(BpeTokenizer, SaveThenLoadEncodesTheSame) {
  const BpeTokenizer tok = BpeTokenizer::load(data_path("llama3_style_bpe.json"));
  const std::string p = temp_path("saved.json");
  tok.save(p);
  const BpeTokenizer again = BpeTokenizer::load(p);
  EXPECT_EQ(again.vocab_size(), tok.vocab_size());
  for (const auto& t : hard_texts()) EXPECT_EQ(again.encode(t), tok.encode(t)) << t;
  EXPECT_THROW(tok.save("/nonexistent-dir/x/tokenizer.json"), UserError);
}

// Throughput on train.txt, one thread, cold and warm word cache. Checked first, never asserted.
TEST(BpeTokenizer, Throughput) {
  const std::string text = read_file(data_path("train.txt"));
  ASSERT_GT(text.size(), 0u);
  for (const char* name : kFixtures) {
    const BpeTokenizer tok = BpeTokenizer::load(data_path(std::string(name) + ".json"));
    // cold: the first pass fills the word cache; warm: best of 5 passes after it.
    double best_warm = 1e30, cold = 0;
    for (int pass = 0; pass < 6; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok.encode(text);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (pass == 0) {
        ASSERT_EQ(tok.decode(ids), text);
        cold = s;
      } else {
        best_warm = std::min(best_warm, s);
      }
    }
    std::printf("[ throughput ] %s: cold %.1f MB/s, warm %.1f MB/s (%zu bytes of train.txt)\n",
                name, text.size() / cold / 1e6, text.size() / best_warm / 1e6, text.size());
  }
}

}  // namespace
}  // namespace lmt
