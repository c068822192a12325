// UnigramModel and a Unigram tokenizer.json through BpeTokenizer: the Viterbi path against an
// exhaustive search on fresh random vocabularies, HF's tie order, unk fusion, byte fallback, and
// load errors naming the field. Ids against Hugging Face itself:
// tests/reference/test_tokenizers.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/unigram_model.h"

namespace lmt {
namespace {

using nlohmann::json;

std::vector<int32_t> encode(const UnigramModel& m, std::string_view s) {
  std::vector<int32_t> out;
  m.encode(s, out);
  return out;
}

json model(const std::vector<std::pair<std::string, double>>& pieces, json unk_id = 0,
           bool byte_fallback = false) {
  json vocab = json::array();
  for (const auto& [p, s] : pieces) vocab.push_back({p, s});
  return {
      {"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", byte_fallback}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(Unigram, ViterbiFindsTheBestSegmentationOnRandomVocabularies) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::string> chars = {"a", "b", "c", "é", "▁"};
  for (int round = 0; round < 200; ++round) {
    // Every character is a piece (no unk); longer pieces of 2-4 characters at random.
    std::vector<std::pair<std::string, double>> pieces = {{"<unk>", 0.0}};
    std::uniform_real_distribution<double> score(-12.0, -0.5);
    for (const auto& c : chars) pieces.emplace_back(c, score(rng));
    std::set<std::string> seen(chars.begin(), chars.end());
    for (int k = 0; k < 25; ++k) {
      std::string p;
      for (int n = 2 + static_cast<int>(rng() % 3); n > 0; --n) p += chars[rng() % chars.size()];
      if (seen.insert(p).second) pieces.emplace_back(p, score(rng));
    }
    const UnigramModel m = UnigramModel::from_json(model(pieces), "test");
    std::string text;
    for (int n = 1 + static_cast<int>(rng() % 9); n > 0; --n) text += chars[rng() % chars.size()];
    // The best score over all segmentations, by exhaustive recursion.
    std::function<double(size_t)> best = [&](size_t at) {
      if (at == text.size()) return 0.0;
      double b = -INFINITY;
      for (const auto& [p, s] : pieces)
        if (text.compare(at, p.size(), p) == 0) b = std::max(b, s + best(at + p.size()));
      return b;
    };
    const auto ids = encode(m, text);
    std::string joined;
    double total = 0.0;
    for (int32_t id : ids) {
      joined += pieces[id].first;
      total += pieces[id].second;
    }
    ASSERT_EQ(joined, text) << "round " << round;
    EXPECT_NEAR(total, best(0), 1e-9) << "round " << round << " text " << text;
  }
}

TEST(Unigram, TiesKeepTheFirstCandidateAsHuggingFaceDoes) {
  // "abc" is a+bc or ab+c, both -3 exactly. HF fills the end node from the earliest start and
  // replaces it only with a strictly better score: a+bc.
  const UnigramModel m = UnigramModel::from_json(
      model({{"<unk>", 0}, {"a", -1}, {"b", -5}, {"c", -1}, {"ab", -2}, {"bc", -2}}), "test");
  EXPECT_EQ(encode(m, "abc"), (std::vector<int32_t>{1, 5}));
  // A strictly better later candidate wins: ab+c once c scores higher.
  const UnigramModel m2 = UnigramModel::from_json(
      model({{"<unk>", 0}, {"a", -1}, {"b", -5}, {"c", -0.5}, {"ab", -2}, {"bc", -2}}), "test");
  EXPECT_EQ(encode(m2, "abc"), (std::vector<int32_t>{4, 3}));
}

TEST(Unigram, UnknownCharactersFuseIntoOneUnk) {
  const UnigramModel m =
      UnigramModel::from_json(model({{"<unk>", 0}, {"a", -1}, {"b", -1}}), "test");
  EXPECT_EQ(encode(m, "a☃☃b☃"), (std::vector<int32_t>{0 + 1, 0, 2, 0}));
  EXPECT_EQ(encode(m, "☃"), (std::vector<int32_t>{0}));
  EXPECT_TRUE(encode(m, "").empty());
  // The unk piece's own text is a piece like any other.
  EXPECT_EQ(encode(m, "<unk>a"), (std::vector<int32_t>{0, 1}));
}

TEST(Unigram, ByteFallbackWritesTheFusedSpanAsBytes) {
  std::vector<std::pair<std::string, double>> pieces = {{"<unk>", 0}, {"a", -1}};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    pieces.emplace_back(hex, -20.0);
  }
  const UnigramModel m = UnigramModel::from_json(model(pieces, 0, true), "test");
  // ☃ is E2 98 83; two of them fuse into one span of six bytes.
  const std::vector<int32_t> snow = {2 + 0xE2, 2 + 0x98, 2 + 0x83};
  std::vector<int32_t> want = {1};
  want.insert(want.end(), snow.begin(), snow.end());
  want.insert(want.end(), snow.begin(), snow.end());
  want.push_back(1);
  EXPECT_EQ(encode(m, "a☃☃a"), want);
  // With a byte piece missing, the whole span falls back to unk.
  pieces.erase(pieces.begin() + 2 + 0x83);
  const UnigramModel gap = UnigramModel::from_json(model(pieces, 0, true), "test");
  EXPECT_EQ(encode(gap, "a☃☃a"), (std::vector<int32_t>{1, 0, 1}));
  // Off, the same span is unk.
  const UnigramModel off = UnigramModel::from_json(model(pieces, 0, false), "test");
  EXPECT_EQ(encode(off, "☃"), (std::vector<int32_t>{0}));
}

TEST(Unigram, NoUnkIdFailsOnlyOnUncoveredText) {
  const UnigramModel m = UnigramModel::from_json(model({{"a", -1}}, nullptr), "tok: model");
  EXPECT_EQ(encode(m, "aa"), (std::vector<int32_t>{0, 0}));
  EXPECT_NE(error_of([&] { encode(m, "ab"); }).find("tok: model.unk_id"), std::string::npos);
}

TEST(Unigram, BadModelsNameTheField) {
  auto err = [](json m) { return error_of([&] { UnigramModel::from_json(m, "tok: model"); }); };
  json ok = model({{"<unk>", 0}, {"a", -1}});
  auto with = [&](const char* key, json v) {
    json m = ok;
    m[key] = std::move(v);
    return m;
  };
  json no_vocab = ok;
  no_vocab.erase("vocab");
  EXPECT_EQ(err(no_vocab), "tok: model.vocab: missing");
  EXPECT_EQ(err(with("vocab", json::array())), "tok: model.vocab: empty");
  EXPECT_EQ(err(with("vocab", json::object())),
            "tok: model.vocab: expected an array of [piece, score] pairs");
  EXPECT_EQ(err(with("vocab", json::parse(R"([["<unk>", 0], ["a", "x"]])"))),
            "tok: model.vocab[1][1]: expected the score as a number, got \"x\"");
  EXPECT_EQ(err(with("vocab", json::parse(R"([["<unk>", 0], ["a", null]])"))),
            "tok: model.vocab[1][1]: expected the score as a number, got null");
  EXPECT_EQ(err(with("vocab", json::parse(R"([["<unk>", 0], [7, -1]])"))),
            "tok: model.vocab[1][0]: expected the piece as a string");
  EXPECT_EQ(err(with("vocab", json::parse(R"([["<unk>", 0], ["a"]])"))),
            "tok: model.vocab[1]: expected a [piece, score] pair");
  EXPECT_EQ(err(with("vocab", json::parse(R"([["<unk>", 0], ["", -1]])"))),
            "tok: model.vocab[1][0]: empty piece");
  EXPECT_EQ(err(with("unk_id", 2)), "tok: model.unk_id: 2 is not an id of the vocab (size 2)");
  EXPECT_EQ(err(with("unk_id", -1)), "tok: model.unk_id: -1 is not an id of the vocab (size 2)");
  EXPECT_EQ(err(with("unk_id", "0")), "tok: model.unk_id: expected an integer, got \"0\"");
  EXPECT_EQ(err(with("byte_fallback", 1)), "tok: model.byte_fallback: expected true or false");
}

// A SentencePiece-style Unigram tokenizer.json (Metaspace, byte fallback) through the loader.
std::string write_tokenizer_json(const json& model_json) {
  const json j = {
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                    {{"id", 1}, {"content", "</s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Metaspace"},
        {"replacement", "▁"},
        {"prepend_scheme", "always"},
        {"split", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "ByteFallback"}},
                                  {{"type", "Metaspace"},
                                   {"replacement", "▁"},
                                   {"prepend_scheme", "always"},
                                   {"split", true}}})}}},
      {"model", model_json}};
  const auto p = std::filesystem::temp_directory_path() /
                 ("lmt_unigram_" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << j.dump();
  return p.string();
}

TEST(Unigram, TokenizerJsonEncodesAndDecodes) {
  std::vector<std::pair<std::string, double>> pieces = {
      {"<unk>", 0}, {"</s>", 0}, {"▁", -2}, {"▁he", -3}, {"llo", -3},
      {"h", -4},    {"e", -4},   {"l", -4}, {"o", -4},   {"▁hello", -4.5}};
  const size_t bytes_at = pieces.size();
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    pieces.emplace_back(hex, -30.0);
  }
  const std::string path = write_tokenizer_json(model(pieces, 0, true));
  const BpeTokenizer tok = BpeTokenizer::load(path);
  EXPECT_TRUE(tok.is_unigram());
  EXPECT_EQ(tok.vocab_size(), static_cast<int32_t>(pieces.size()));
  const int32_t x = static_cast<int32_t>(bytes_at) + 'x';
  EXPECT_EQ(tok.encode("hello hex</s>"), (std::vector<int32_t>{9, 3, x, 1}));
  // Metaspace prepends "▁" to the text and the decoder drops the first one again, so a leading
  // space is lost (as in HF); everything else comes back, the unknown characters as bytes.
  for (const std::string t : {"hello hello", "héllo ☃ wörld", "hello</s>", " two  spaces"})
    EXPECT_EQ(tok.decode(tok.encode(t)), t[0] == ' ' ? t.substr(1) : t) << t;
  std::filesystem::remove(path);
}

TEST(Unigram, TokenizerJsonErrorsNameTheFile) {
  json m = model({{"<unk>", 0}, {"a", -1}});
  m["vocab"][1][1] = "high";
  const std::string path = write_tokenizer_json(m);
  const std::string e = error_of([&] { BpeTokenizer::load(path); });
  EXPECT_EQ(
      e, "tokenizer " + path + ": model.vocab[1][1]: expected the score as a number, got \"high\"");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lmt
