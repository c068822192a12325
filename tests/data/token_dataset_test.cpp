// Byte tokenizer, document-level train/validation split, sample windows, entropy, size errors.
#include "data/token_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "data/byte_tokenizer.h"

namespace lmt {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.eot_id(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "\xc3\x28 invalid UTF-8 \xf0\x28\x8c";
  std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(ids[i], static_cast<int32_t>(i));
  EXPECT_EQ(tok.decode(ids), all);
  ids.insert(ids.begin() + 3, ByteTokenizer::kEot);
  ids.push_back(ByteTokenizer::kEot);
  ids.push_back(1000);
  EXPECT_EQ(tok.decode(ids), all);  // EOT and out-of-range ids render as nothing
  EXPECT_THROW(check_tokenizer_name("gpt2"), UserError);
  check_tokenizer_name("bytes");
}

// Splits a stream at EOT into documents.
std::vector<std::string> documents_of(const TokenDataset& d) {
  std::vector<std::string> out(1);
  for (int32_t t : d.tokens())
    if (t == ByteTokenizer::kEot)
      out.emplace_back();
    else
      out.back().push_back(static_cast<char>(t));
  EXPECT_TRUE(out.back().empty()) << "stream must end with EOT";
  out.pop_back();
  return out;
}

std::vector<std::string> numbered_docs(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) docs.push_back("document number " + std::to_string(i) + " text");
  return docs;
}

DatasetSplits build(const std::vector<std::string>& docs, double val_fraction) {
  DatasetBuilder b;
  for (const auto& d : docs) b.add_document(d);
  return b.finish(val_fraction);
}

TEST(TokenDataset, SplitByDocumentIsDeterministicDisjointAndComplete) {
  auto docs = numbered_docs(400);
  DatasetSplits s = build(docs, 0.1);
  auto train = documents_of(s.train), val = documents_of(s.val);
  EXPECT_EQ(s.train.num_documents(), static_cast<int64_t>(train.size()));
  EXPECT_EQ(s.val.num_documents(), static_cast<int64_t>(val.size()));
  EXPECT_EQ(train.size() + val.size(), docs.size());
  // Roughly val_fraction of the documents (binomial, 400 docs: 40 +- 6 sd).
  EXPECT_GT(val.size(), 15u);
  EXPECT_LT(val.size(), 70u);
  std::set<std::string> tset(train.begin(), train.end()), vset(val.begin(), val.end());
  for (const auto& d : val) EXPECT_EQ(tset.count(d), 0u) << d;
  std::set<std::string> all(docs.begin(), docs.end()), both = tset;
  both.insert(vset.begin(), vset.end());
  EXPECT_EQ(both, all);
  // Source order kept inside each split; the same input gives the same split.
  auto pos = [&](const std::string& d) {
    return std::find(docs.begin(), docs.end(), d) - docs.begin();
  };
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end(),
                             [&](auto& a, auto& b) { return pos(a) < pos(b); }));
  DatasetSplits again = build(docs, 0.1);
  EXPECT_EQ(again.train.tokens(), s.train.tokens());
  EXPECT_EQ(again.val.tokens(), s.val.tokens());
  // A document's split depends on its content only, not on its neighbours.
  std::vector<std::string> fewer(docs.begin() + 100, docs.end());
  auto val2 = documents_of(build(fewer, 0.1).val);
  for (const auto& d : val2) EXPECT_EQ(vset.count(d), 1u) << d;
}

TEST(TokenDataset, SmallCorporaGetOneDocumentInEachSplit) {
  DatasetSplits s = build({"alpha", "beta"}, 0.01);
  EXPECT_EQ(s.train.num_documents(), 1);
  EXPECT_EQ(s.val.num_documents(), 1);
  s = build({"a", "b", "c"}, 0.99);
  EXPECT_EQ(s.train.num_documents(), 1);
  s = build(numbered_docs(20), 0.0);
  EXPECT_EQ(s.val.num_documents(), 0);
  EXPECT_EQ(s.val.num_tokens(), 0);
  s = build({"only"}, 0.5);  // one document cannot be split
  EXPECT_EQ(s.train.num_documents() + s.val.num_documents(), 1);
  EXPECT_THROW(build({"a"}, 1.0), UserError);
  EXPECT_THROW(build({"a"}, -0.1), UserError);
}

TEST(TokenDataset, SamplesAreWindowsWithShiftedLabels) {
  std::vector<int32_t> t(23);
  for (int i = 0; i < 23; ++i) t[i] = 100 + i;
  TokenDataset d("train", t, 1);
  const int64_t L = 5;
  EXPECT_EQ(d.num_samples(L), 4);  // (23 - 1) / 5
  EXPECT_EQ(d.num_samples(22), 1);
  EXPECT_EQ(d.num_samples(23), 0);
  std::vector<int32_t> ids(L), labels(L);
  for (int64_t i = 0; i < 4; ++i) {
    d.sample(i, L, ids.data(), labels.data());
    for (int64_t j = 0; j < L; ++j) {
      EXPECT_EQ(ids[j], 100 + i * L + j);
      EXPECT_EQ(labels[j], 100 + i * L + j + 1);
    }
  }
}

TEST(TokenDataset, UnigramEntropy) {
  EXPECT_DOUBLE_EQ(TokenDataset("x", {7, 7, 7}, 1).unigram_entropy(), 0.0);
  EXPECT_NEAR(TokenDataset("x", {1, 2, 1, 2}, 1).unigram_entropy(), std::log(2.0), 1e-12);
  // p = (1/2, 1/4, 1/4): H = 1.5 bits.
  EXPECT_NEAR(TokenDataset("x", {0, 0, 5, 256}, 1).unigram_entropy(), 1.5 * std::log(2.0), 1e-12);
  std::vector<int32_t> uniform;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 257; ++i) uniform.push_back(i);
  EXPECT_NEAR(TokenDataset("x", uniform, 1).unigram_entropy(), std::log(257.0), 1e-12);
  EXPECT_EQ(TokenDataset().unigram_entropy(), 0.0);
}

TEST(TokenDataset, TooLittleDataSaysHowMuchIsNeeded) {
  DatasetSplits s = build({"hello", "world, a longer one"}, 0.5);
  const TokenDataset& small = s.val.num_tokens() < s.train.num_tokens() ? s.val : s.train;
  try {
    small.require_samples(64);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("the " + small.name() + " split has " + std::to_string(small.num_tokens()) +
                       " tokens"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("data.seq_len = 64 needs at least 65 tokens"), std::string::npos) << msg;
  }
  small.require_samples(small.num_tokens() - 1);  // exactly one window fits
}

TEST(TokenDataset, BuildRejectsWeightsAndOtherTokenizers) {
  std::vector<TextSourceSpec> src{{"/nonexistent", "text", "line", "%", 1.0},
                                  {"/nonexistent", "text", "line", "%", 2.0}};
  try {
    build_datasets(src, "bytes", 8, 0.1);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data.sources[1].weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(build_datasets(src, "sentencepiece", 8, 0.1), UserError);
}

}  // namespace
}  // namespace lmt
