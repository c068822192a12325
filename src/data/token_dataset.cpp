// Train/validation token streams built from text documents; see token_dataset.h.
#include "data/token_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data/byte_tokenizer.h"

namespace lmt {

int64_t TokenDataset::num_samples(int64_t seq_len) const {
  LMT_CHECK(seq_len >= 1);
  return num_tokens() >= 1 ? (num_tokens() - 1) / seq_len : 0;
}

void TokenDataset::sample(int64_t i, int64_t seq_len, int32_t* ids, int32_t* labels) const {
  LMT_CHECK(i >= 0 && i < num_samples(seq_len), "sample " + std::to_string(i) + " of " + name_);
  const int32_t* w = tokens_.data() + i * seq_len;
  std::memcpy(ids, w, static_cast<size_t>(seq_len) * sizeof(int32_t));
  std::memcpy(labels, w + 1, static_cast<size_t>(seq_len) * sizeof(int32_t));
}

void TokenDataset::require_samples(int64_t seq_len) const {
  if (num_samples(seq_len) > 0) return;
  std::string hint = name_ == "validation" ? "add documents, or lower data.seq_len or raise "
                                             "data.val_fraction (0 turns evaluation data off)"
                                           : "add documents or lower data.seq_len";
  throw UserError("data: the " + name_ + " split has " + std::to_string(num_tokens()) +
                  " tokens (" + std::to_string(num_documents_) +
                  " documents); data.seq_len = " + std::to_string(seq_len) + " needs at least " +
                  std::to_string(seq_len + 1) + " tokens for one sample: " + hint);
}

double TokenDataset::unigram_entropy() const {
  if (tokens_.empty()) return 0.0;
  int32_t max_id = *std::max_element(tokens_.begin(), tokens_.end());
  LMT_CHECK(*std::min_element(tokens_.begin(), tokens_.end()) >= 0);
  std::vector<int64_t> counts(static_cast<size_t>(max_id) + 1, 0);
  for (int32_t t : tokens_) ++counts[static_cast<size_t>(t)];
  double n = static_cast<double>(tokens_.size()), h = 0.0;
  for (int64_t c : counts)
    if (c > 0) h -= (c / n) * std::log(c / n);
  return h;
}

double document_split_value(std::string_view doc) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (char c : doc) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;  // splitmix64 finaliser: spreads FNV's weak high bits
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

void DatasetBuilder::add_document(std::string_view doc) {
  doc_begin_.push_back(static_cast<int64_t>(tokens_.size()));
  split_value_.push_back(document_split_value(doc));
  ByteTokenizer().encode_append(doc, tokens_);
  tokens_.push_back(ByteTokenizer::kEot);
}

DatasetSplits DatasetBuilder::finish(double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw UserError("data.val_fraction: " + std::to_string(val_fraction) + " is not in [0, 1)");
  const size_t n = doc_begin_.size();
  std::vector<char> is_val(n);
  size_t n_val = 0;
  for (size_t d = 0; d < n; ++d) n_val += (is_val[d] = split_value_[d] < val_fraction);
  if (val_fraction > 0 && n >= 2) {
    if (n_val == 0)
      is_val[std::min_element(split_value_.begin(), split_value_.end()) - split_value_.begin()] = 1;
    if (n_val == n)
      is_val[std::max_element(split_value_.begin(), split_value_.end()) - split_value_.begin()] = 0;
  }
  std::vector<int32_t> split_tokens[2];
  int64_t split_docs[2] = {0, 0};
  for (size_t d = 0; d < n; ++d) {
    int64_t end = d + 1 < n ? doc_begin_[d + 1] : static_cast<int64_t>(tokens_.size());
    auto& out = split_tokens[is_val[d] ? 1 : 0];
    out.insert(out.end(), tokens_.begin() + doc_begin_[d], tokens_.begin() + end);
    ++split_docs[is_val[d] ? 1 : 0];
  }
  tokens_.clear();
  tokens_.shrink_to_fit();
  doc_begin_.clear();
  split_value_.clear();
  DatasetSplits s;
  s.train = TokenDataset("train", std::move(split_tokens[0]), split_docs[0]);
  s.val = TokenDataset("validation", std::move(split_tokens[1]), split_docs[1]);
  return s;
}

std::string DatasetSplits::summary(int64_t seq_len) const {
  TextSourceStats total;
  std::string skipped;
  for (size_t i = 0; i < sources.size(); ++i) {
    const TextSourceStats& s = sources[i];
    total.files += s.files;
    total.documents += s.documents;
    total.bytes += s.bytes;
    if (s.skipped.total == 0) continue;
    skipped += "; data.sources[" + std::to_string(i) + "] skipped " +
               std::to_string(s.skipped.total) + " bad records (";
    bool first = true;
    for (const auto& [reason, n] : s.skipped.by_reason) {
      skipped += (first ? "" : ", ") + reason + ": " + std::to_string(n);
      first = false;
    }
    skipped += ")";
  }
  auto split = [&](const TokenDataset& d) {
    return d.name() + " " + std::to_string(d.num_documents()) + " documents, " +
           std::to_string(d.num_tokens()) + " tokens, " + std::to_string(d.num_samples(seq_len)) +
           " samples";
  };
  return "data: " + std::to_string(sources.size()) + " sources, " + std::to_string(total.files) +
         " files, " + std::to_string(total.documents) + " documents, " +
         std::to_string(total.bytes) + " bytes; " + split(train) + "; " + split(val) +
         " (seq_len " + std::to_string(seq_len) + ")" + skipped;
}

DatasetSplits build_datasets(const std::vector<TextSourceSpec>& sources,
                             const std::string& tokenizer, int64_t seq_len, double val_fraction) {
  check_tokenizer_name(tokenizer);
  if (seq_len < 1) throw UserError("data.seq_len: must be >= 1, got " + std::to_string(seq_len));
  if (sources.empty()) throw UserError("data.sources: no sources given");
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i].weight != 1.0)
      throw UserError("data.sources[" + std::to_string(i) +
                      "].weight: " + std::to_string(sources[i].weight) +
                      " is not supported yet (source mixing comes later; use 1.0)");
  DatasetBuilder builder;
  std::vector<TextSourceStats> stats;
  for (size_t i = 0; i < sources.size(); ++i)
    stats.push_back(for_each_document(sources[i], static_cast<int>(i),
                                      [&](std::string_view doc) { builder.add_document(doc); }));
  DatasetSplits s = builder.finish(val_fraction);
  s.sources = std::move(stats);
  s.train.require_samples(seq_len);
  return s;
}

}  // namespace lmt
