// The ids of a tokenizer.json, checked once at load for the BPE and the Unigram model alike: an
// id at or above 2^31 - 1 (which crashed the vocab size's int32 id + 1), 2^32 + 5 (which
// get<int32_t> read as 5), two tokens with one id, an empty vocab, and gaps. Each error names the
// file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer/bpe_tokenizer.h"
#include "data/tokenizer/tokenizer.h"

namespace lmt {
namespace {

using nlohmann::json;

json bpe(json vocab) {
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

json unigram(json pieces) {
  json vocab = json::array();
  for (const auto& p : pieces) vocab.push_back({p, -1.0});
  return {{"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}};
}

json with_added(json j, const std::string& content, json id) {
  j["added_tokens"].push_back(
      {{"content", content}, {"id", id}, {"special", true}, {"normalized", false}});
  return j;
}

std::string write(const std::string& name, const json& j) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         ("lmt_ids_" + std::to_string(::getpid()) + "_" + name + ".json"))
                            .string();
  std::ofstream(p, std::ios::binary) << j.dump();
  return p;
}

// The UserError of loading `j`, which must name the file and hold `needle`.
void expect_refused(const std::string& name, const json& j, const std::string& needle) {
  const std::string path = write(name, j);
  try {
    BpeTokenizer::load(path);
    ADD_FAILURE() << name << ": loaded, expected '" << needle << "'";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tokenizer " + path + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(TokenIds, BpeIdAtTwoTo31MinusOneInVocabIsRefused) {
  expect_refused("bpe_huge_vocab", bpe({{"a", 0}, {"b", 2147483647}}),
                 R"(model.vocab["b"]: id 2147483647 is not below 2^31 - 1)");
}

TEST(TokenIds, BpeIdAtTwoTo31MinusOneInAddedTokensIsRefused) {
  expect_refused("bpe_huge_added", with_added(bpe({{"a", 0}}), "<s>", 2147483647),
                 "added_tokens[0].id: id 2147483647 is not below 2^31 - 1");
}

TEST(TokenIds, BpeIdAboveTwoTo32IsNotWrapped) {
  expect_refused("bpe_wrap_vocab", bpe({{"a", 0}, {"b", 4294967301}}),
                 R"(model.vocab["b"]: id 4294967301 is not below 2^31 - 1)");
  expect_refused("bpe_wrap_added", with_added(bpe({{"a", 0}}), "<s>", 4294967301),
                 "added_tokens[0].id: id 4294967301 is not below 2^31 - 1");
}

TEST(TokenIds, BpeNegativeAndFractionalIdsAreRefused) {
  expect_refused("bpe_negative", bpe({{"a", 0}, {"b", -4294967295}}),
                 R"(model.vocab["b"]: id -4294967295 is negative)");
  expect_refused("bpe_fraction", bpe({{"a", 0}, {"b", 1.5}}),
                 R"(model.vocab["b"]: id 1.5 is not an integer)");
}

TEST(TokenIds, BpeDuplicateIdsAreRefused) {
  expect_refused("bpe_dup_vocab", bpe({{"a", 0}, {"b", 0}}),
                 R"(model.vocab["b"]: id 0 is also the id of "a" in model.vocab)");
  expect_refused("bpe_dup_added", with_added(bpe({{"a", 0}, {"x", 1}}), "<s>", 1),
                 R"(added_tokens[0].id: id 1 is also the id of "x" in model.vocab)");
  expect_refused("bpe_dup_two_added", with_added(with_added(bpe({{"a", 0}}), "<s>", 1), "</s>", 1),
                 R"(added_tokens[1].id: id 1 is also the id of "<s>" in added_tokens[0])");
}

TEST(TokenIds, AnAddedTokenMayRepeatItsOwnVocabId) {
  // HF's tokenizers accepts this (Llama's <s> is both in model.vocab and in added_tokens).
  const json j = with_added(bpe({{"a", 0}, {"<s>", 1}}), "<s>", 1);
  const BpeTokenizer tok = BpeTokenizer::load(write("bpe_same", j));
  EXPECT_EQ(tok.vocab_size(), 2);
  EXPECT_EQ(tok.encode("a<s>"), (std::vector<int32_t>{0, 1}));
}

TEST(TokenIds, BpeEmptyVocabIsRefused) {
  expect_refused("bpe_empty", bpe(json::object()), "model.vocab: empty");
  expect_refused("bpe_empty_added", with_added(bpe(json::object()), "<s>", 0),
                 "model.vocab: empty");
}

TEST(TokenIds, GapsAreUnusedIdsThatDecodeRefuses) {
  const json j = with_added(bpe({{"a", 0}, {"b", 1}}), "<s>", 10);
  const BpeTokenizer tok = BpeTokenizer::load(write("bpe_gap", j));
  EXPECT_EQ(tok.vocab_size(), 11);
  EXPECT_EQ(tok.encode("ab<s>"), (std::vector<int32_t>{0, 1, 10}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 10}), "a <s>");  // no decoder: joined by spaces
  EXPECT_THROW(tok.decode(std::vector<int32_t>{5}), UserError);
}

TEST(TokenIds, AVocabMostlyOfGapsIsRefused) {
  // Sized by its largest id, this one's tables would take tens of GB.
  expect_refused("bpe_sparse", with_added(bpe({{"a", 0}}), "<s>", 2147483646),
                 "added_tokens[0].id: id 2147483646 leaves 2147483645 ids below it unused");
}

TEST(TokenIds, UnigramAddedIdAtTwoTo31MinusOneIsRefused) {
  expect_refused("uni_huge_added", with_added(unigram({"<unk>", "a"}), "<s>", 2147483647),
                 "added_tokens[0].id: id 2147483647 is not below 2^31 - 1");
}

TEST(TokenIds, UnigramAddedIdAboveTwoTo32IsNotWrapped) {
  expect_refused("uni_wrap_added", with_added(unigram({"<unk>", "a"}), "<s>", 4294967297),
                 "added_tokens[0].id: id 4294967297 is not below 2^31 - 1");
}

TEST(TokenIds, UnigramAddedIdOfAnotherPieceIsRefused) {
  expect_refused("uni_dup_added", with_added(unigram({"<unk>", "a"}), "<s>", 1),
                 R"(added_tokens[0].id: id 1 is also the id of "a" in model.vocab)");
  const json same = with_added(unigram({"<unk>", "a", "<s>"}), "<s>", 2);
  EXPECT_EQ(BpeTokenizer::load(write("uni_same", same)).vocab_size(), 3);
}

TEST(TokenIds, UnigramEmptyVocabIsRefused) {
  expect_refused("uni_empty", unigram(json::array()), "model.vocab: empty");
}

TEST(TokenIds, PostProcessorIdsMustBeIdsOfTheVocab) {
  json j = with_added(bpe({{"a", 0}, {"<s>", 1}}), "<s>", 1);
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {4294967297}}, {"tokens", {"<s>"}}}}}}};
  const std::string path = write("post_wrap", j);
  try {
    load_tokenizer(path);
    ADD_FAILURE() << "loaded a post_processor id of 2^32 + 1";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  path + R"(: post_processor.special_tokens["<s>"].ids: 4294967297 is not an id)"),
              std::string::npos)
        << e.what();
  }
  j["post_processor"]["special_tokens"]["<s>"]["ids"] = {1};
  EXPECT_EQ(load_tokenizer(write("post_ok", j))->encode_with_special("a"),
            (std::vector<int32_t>{1, 0}));
}

// Found by the tokenizer.json fuzz test: an added token with the content of a vocab token but
// another id took that content's entry in the vocab, so the vocab token's id (here unk's, which
// encode still gave) was no longer an id of the vocab, and decode refused it.
TEST(TokenIds, ContentRepeatedUnderAnotherIdKeepsBothIds) {
  json j = with_added(bpe({{"<unk>", 0}, {"a", 1}}), "<unk>", 2);
  j["model"]["unk_token"] = "<unk>";
  const BpeTokenizer tok = BpeTokenizer::load(write("repeat_content", j));
  EXPECT_EQ(tok.vocab_size(), 3);
  EXPECT_TRUE(tok.has_id(0) && tok.has_id(1) && tok.has_id(2));
  const std::vector<int32_t> ids = tok.encode("ab<unk>");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_NO_THROW(tok.decode(ids));
  EXPECT_EQ(tok.id_to_token(0), "<unk>");
}

// Found by the tokenizer.json fuzz test: a post_processor field of another type than HF writes
// (a null SpecialToken id) escaped load_tokenizer as nlohmann's type_error, and so did an added
// token's "special" that is not a boolean, when BOS / EOS were looked for by name.
TEST(TokenIds, PostProcessorOrSpecialFlagOfAnotherTypeIsNoCrash) {
  json j = with_added(bpe({{"a", 0}, {"<s>", 1}}), "<s>", 1);
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", nullptr}}}}}},
                         {"special_tokens", json::object()}};
  const std::string path = write("post_null", j);
  try {
    load_tokenizer(path);
    ADD_FAILURE() << "loaded a SpecialToken id of null";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": post_processor: unexpected JSON content"),
              std::string::npos)
        << e.what();
  }
  j.erase("post_processor");
  j["added_tokens"][0]["special"] = "yes";  // not special, as BpeTokenizer::load reads it
  EXPECT_EQ(load_tokenizer(write("special_str", j))->bos_id(), -1);
  j["added_tokens"][0]["special"] = true;
  EXPECT_EQ(load_tokenizer(write("special_true", j))->bos_id(), 1);
}

}  // namespace
}  // namespace lmt
