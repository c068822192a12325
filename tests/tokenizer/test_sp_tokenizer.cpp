// SpTokenizer: ids equal to those of the sentencepiece 0.2.2 Python library (tests/data/tokenizers/
// ref_ids.json), the whole vocabulary against the .vocab files, decode round trips through the
// nmt_nfkc normalizer, special ids, errors naming the file or id, threads, and encode throughput.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/tokenizer/sp_tokenizer.h"

namespace lmt {
namespace {

std::string fixture(const std::string& name) {
  return std::string(LMT_TEST_DATA) + "/tokenizers/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const nlohmann::json& ref_ids() {
  static const nlohmann::json j = nlohmann::json::parse(read_text(fixture("ref_ids.json")));
  return j;
}

std::vector<std::string> ref_texts() {
  return ref_ids().at("texts").get<std::vector<std::string>>();
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Writes `bytes` to a fresh file under the temp dir and returns its path.
std::string temp_file(const std::string& stem, const std::string& bytes) {
  const auto path =
      std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + ".model");
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// The two fixture models, by their key in ref_ids.json.
class SpModel : public ::testing::TestWithParam<std::string> {
 protected:
  SpTokenizer tok() const { return SpTokenizer::load(fixture(GetParam() + ".model")); }
};

TEST_P(SpModel, EncodeMatchesReferenceIds) {
  const SpTokenizer t = tok();
  const auto texts = ref_texts();
  const auto expected = ref_ids().at(GetParam()).get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = t.encode(texts[i]);
    EXPECT_EQ(got, expected[i]) << "text " << i << " '" << texts[i] << "'\n  expected "
                                << show(expected[i]) << "\n  got      " << show(got);
  }
}

// The whole vocabulary, both ways, against the .vocab file the trainer wrote beside the model
// ("piece<TAB>score" per line, in id order).
TEST_P(SpModel, VocabularyMatchesVocabFile) {
  const SpTokenizer t = tok();
  std::ifstream f(fixture(GetParam() + ".vocab"));
  ASSERT_TRUE(f);
  std::string line;
  int32_t id = 0;
  for (; std::getline(f, line); ++id) {
    const std::string piece = line.substr(0, line.find('\t'));
    ASSERT_LT(id, t.vocab_size()) << "line " << id << " '" << piece << "'";
    EXPECT_EQ(t.id_to_piece(id), piece) << "id " << id;
    EXPECT_EQ(t.piece_to_id(piece), id) << "piece '" << piece << "'";
  }
  EXPECT_EQ(t.vocab_size(), id);
  EXPECT_EQ(t.vocab_size(), 600);
}

// Both fixtures were trained with sentencepiece's defaults: <unk>=0, <s>=1, </s>=2, no pad.
TEST_P(SpModel, SpecialIds) {
  const SpTokenizer t = tok();
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.pad_id(), -1);
  EXPECT_EQ(t.id_to_piece(t.unk_id()), "<unk>");
  EXPECT_EQ(t.id_to_piece(t.bos_id()), "<s>");
  EXPECT_EQ(t.id_to_piece(t.eos_id()), "</s>");
  EXPECT_EQ(t.piece_to_id("<s>"), t.bos_id());
  EXPECT_EQ(t.piece_to_id("</s>"), t.eos_id());
  EXPECT_EQ(t.piece_to_id("no such piece"), t.unk_id());
  // encode never adds BOS/EOS; decode renders them as nothing.
  const auto ids = t.encode("Hello world!");
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), t.bos_id());
  EXPECT_NE(ids.back(), t.eos_id());
  std::vector<int32_t> framed = {t.bos_id()};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.push_back(t.eos_id());
  EXPECT_EQ(t.decode(framed), "Hello world!");
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_EQ(t.decode({}), "");
}

TEST_P(SpModel, DecodeRejectsOutOfRangeIds) {
  const SpTokenizer t = tok();
  const auto ok = t.encode("Hello");
  for (int32_t bad : {t.vocab_size(), -1, 1 << 30}) {
    auto ids = ok;
    ids.push_back(bad);
    const std::string id_text = "id " + std::to_string(bad) + " ";
    try {
      t.decode(ids);
      ADD_FAILURE() << "decode accepted " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(id_text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(GetParam() + ".model"), std::string::npos) << e.what();
    }
    try {
      t.id_to_piece(bad);
      ADD_FAILURE() << "id_to_piece accepted " << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(id_text), std::string::npos) << e.what();
    }
  }
}

// Moving keeps the loaded model; threads share one tokenizer and get the single-thread ids.
TEST_P(SpModel, MovesAndSharesAcrossThreads) {
  SpTokenizer a = tok();
  const auto expected = a.encode("The quick brown fox");
  SpTokenizer b = std::move(a);
  EXPECT_EQ(b.encode("The quick brown fox"), expected);
  SpTokenizer c = SpTokenizer::load(fixture("sp_bpe.model"));
  c = std::move(b);
  EXPECT_EQ(c.encode("The quick brown fox"), expected);
  EXPECT_EQ(c.model_path(), fixture(GetParam() + ".model"));

  std::vector<std::string> lines;
  std::istringstream in(read_text(fixture("train.txt")));
  for (std::string l; std::getline(in, l) && lines.size() < 2000;) lines.push_back(l);
  std::vector<std::vector<int32_t>> single;
  for (const auto& l : lines) single.push_back(c.encode(l));
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < lines.size(); ++i)
          if (c.encode(lines[i]) != single[i]) ++mismatches[k];
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < kThreads; ++k) EXPECT_EQ(mismatches[k], 0) << "thread " << k;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpModel, ::testing::Values("sp_bpe", "sp_unigram"),
                         [](const auto& info) { return info.param; });

// decode(encode(t)) is the text after the model's nmt_nfkc normalizer, which (with the default
// remove_extra_whitespaces) maps tab and newline to a space, drops leading and trailing
// whitespace and squeezes runs of spaces to one. Other ref texts are already normal.
std::string normalized(size_t i, const std::string& text) {
  switch (i) {
    case 3:
      return "tabs and spaces";  // "tabs\tand  spaces"
    case 6:
      return "line1 line2";  // "line1\nline2"
    case 8:
      return "x";  // "  x"
    default:
      return text;
  }
}

// The BPE model has byte fallback, so every text survives up to normalization, and the
// normalized text is a fixed point: it encodes to the same ids again.
TEST(SpTokenizer, BpeRoundTripIsTheNormalizedText) {
  const SpTokenizer t = SpTokenizer::load(fixture("sp_bpe.model"));
  const auto texts = ref_texts();
  ASSERT_EQ(texts.size(), 10u);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = t.encode(texts[i]);
    const std::string back = t.decode(ids);
    EXPECT_EQ(back, normalized(i, texts[i])) << "text " << i;
    EXPECT_EQ(back == texts[i], normalized(i, texts[i]) == texts[i]) << "text " << i;
    EXPECT_EQ(t.encode(back), ids) << "text " << i;
  }
  // Byte fallback: the emoji and CJK text are spelled in <0xNN> pieces, no unknowns.
  for (int32_t id : t.encode(texts[9])) EXPECT_NE(id, t.unk_id());
  EXPECT_EQ(t.id_to_piece(t.encode("\xF0\x9F\x99\x82").back()), "<0x82>");  // U+1F642's last byte
}

// The unigram model has no byte fallback: characters outside its vocabulary (ï, é, ö, the
// emoji, most CJK) encode to <unk>, which decodes as " \u2047 " (sentencepiece's unk surface).
TEST(SpTokenizer, UnigramRoundTripMarksUnknowns) {
  const SpTokenizer t = SpTokenizer::load(fixture("sp_unigram.model"));
  const auto texts = ref_texts();
  ASSERT_EQ(texts.size(), 10u);
  const std::string q = "\xE2\x81\x87";  // U+2047 DOUBLE QUESTION MARK
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = t.encode(texts[i]);
    const bool has_unk = std::find(ids.begin(), ids.end(), t.unk_id()) != ids.end();
    const std::string back = t.decode(ids);
    switch (i) {
      case 2:
        EXPECT_EQ(back, "na " + q + " ve r " + q + " sum " + q + " ");
        break;
      case 5:
        EXPECT_EQ(back, "\xC3\xBCn " + q + " c " + q + " d " + q + "   " + q + " ");
        break;
      case 9:
        EXPECT_EQ(back, " " + q + " \xE5\xAD\x97 " + q + " ");
        break;
      default:
        EXPECT_FALSE(has_unk) << "text " << i;
        EXPECT_EQ(back, normalized(i, texts[i])) << "text " << i;
        continue;
    }
    EXPECT_TRUE(has_unk) << "text " << i;
  }
}

TEST(SpTokenizer, LoadErrorsNameTheFile) {
  const std::string missing = "/nonexistent/dir/tok.model";
  try {
    SpTokenizer::load(missing);
    ADD_FAILURE() << "loaded a missing file";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;  // sentencepiece's status
  }
  // Garbage fails protobuf parsing; an empty file parses as an empty model with no <unk>.
  for (const auto& [stem, bytes] :
       {std::pair<std::string, std::string>{"garbage", "not a model"}, {"empty", ""}}) {
    const std::string path = temp_file("lmt_sptok_" + stem, bytes);
    try {
      SpTokenizer::load(path);
      ADD_FAILURE() << "loaded " << stem;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("is not a valid SentencePiece model: Internal:"), std::string::npos)
          << msg;
    }
    std::filesystem::remove(path);
  }
}

// A piece table libsentencepiece's trie cannot index (an empty piece; found by fuzz_sp_model)
// makes its Load throw darts_clone's exception: a UserError naming the model.
TEST(SpTokenizer, AnEmptyPieceIsAUserError) {
  const std::string path = std::string(LMT_TEST_DATA) + "/fuzz/sp_model/empty_piece.model";
  try {
    SpTokenizer::load(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A model that loads but cannot encode every text (found by fuzz_sp_model: libsentencepiece
// leaves normalised text that no piece of its damaged table covers) refuses the text with a
// UserError naming the model, not a failed internal check.
TEST(SpTokenizer, AModelThatCannotEncodeATextIsAUserError) {
  const std::string path = std::string(LMT_TEST_DATA) + "/fuzz/sp_model/encode_fails.model";
  const SpTokenizer sp = SpTokenizer::load(path);
  int refused = 0;
  for (const std::string text :
       {"", "Hello world, hello!", "naïve 中文 🙂\n\t  x", "a\xff\xfe b\xc3"}) {
    try {
      sp.encode(text);
    } catch (const UserError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(refused, 0);
}

// Single-thread encode throughput on train.txt (436 KB of Python source and prose), once as one
// string and once line by line, the way a dataset would feed documents. Checks the ids first.
TEST(SpTokenizer, EncodeThroughput) {
  const std::string text = read_text(fixture("train.txt"));
  ASSERT_GT(text.size(), 100000u);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  for (const char* model : {"sp_bpe", "sp_unigram"}) {
    const SpTokenizer t = SpTokenizer::load(fixture(std::string(model) + ".model"));
    const auto whole = t.encode(text);
    ASSERT_GT(whole.size(), text.size() / 8) << model;
    ASSERT_LT(whole.size(), text.size()) << model;
    for (int32_t id : whole) ASSERT_TRUE(id >= 0 && id < t.vocab_size()) << model;

    using Clock = std::chrono::steady_clock;
    double best_whole = 1e30, best_lines = 1e30;
    size_t n_tokens = 0;
    // Two passes keep the suite fast; bench/tokenizer_bench.cpp is the measurement to quote.
    for (int rep = 0; rep < 2; ++rep) {
      auto t0 = Clock::now();
      n_tokens = t.encode(text).size();
      auto t1 = Clock::now();
      size_t n_line_tokens = 0;
      for (const auto& l : lines) n_line_tokens += t.encode(l).size();
      auto t2 = Clock::now();
      ASSERT_GT(n_line_tokens, 0u);
      best_whole = std::min(best_whole, std::chrono::duration<double>(t1 - t0).count());
      best_lines = std::min(best_lines, std::chrono::duration<double>(t2 - t1).count());
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf(
        "[ perf     ] %-10s encode %.2f MB: one string %.1f MB/s (%zu tokens, %.2f "
        "bytes/token), line by line %.1f MB/s (%zu lines), best of 2, 1 thread\n",
        model, mb, mb / best_whole, n_tokens,
        static_cast<double>(text.size()) / static_cast<double>(n_tokens), mb / best_lines,
        lines.size());
  }
}

}  // namespace
}  // namespace lmt
