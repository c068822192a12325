// Token streams for training and validation. Every document becomes its bytes plus EOT; each
// document goes wholly to one split, chosen by a hash of its content (so the split is stable
// across runs, machines, seeds and source order, and duplicated documents never straddle the
// split); each split's documents are concatenated, in source order, into one int32 stream.
// A sample is a window of seq_len + 1 tokens starting at i * seq_len (stride seq_len: windows share
// one token at their edges, so no label is lost); ids are its first seq_len tokens, labels its
// last.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/text_source.h"

namespace lmt {

class TokenDataset {
 public:
  TokenDataset() = default;
  TokenDataset(std::string name, std::vector<int32_t> tokens, int64_t num_documents)
      : name_(std::move(name)), tokens_(std::move(tokens)), num_documents_(num_documents) {}

  const std::string& name() const { return name_; }  // "train" or "validation"
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_documents() const { return num_documents_; }

  // (num_tokens - 1) / seq_len, or 0 when there is not one window of seq_len + 1 tokens.
  int64_t num_samples(int64_t seq_len) const;
  // ids[seq_len] = tokens[i*seq_len, i*seq_len + seq_len), labels[seq_len] = the same shifted by 1.
  void sample(int64_t i, int64_t seq_len, int32_t* ids, int32_t* labels) const;
  // Throws UserError when there is no sample: names the split, its token count and what seq_len
  // needs.
  void require_samples(int64_t seq_len) const;
  // Entropy of the stream's unigram distribution, nats per token (0 for an empty stream). A model
  // that learned anything beyond token frequencies has a loss below this.
  double unigram_entropy() const;

 private:
  std::string name_;
  std::vector<int32_t> tokens_;
  int64_t num_documents_ = 0;
};

// The number in [0, 1) that decides a document's split: a 64-bit FNV-1a hash of its bytes,
// mixed by the splitmix64 finaliser. Documents with a value below val_fraction go to validation.
double document_split_value(std::string_view doc);

struct DatasetSplits {
  TokenDataset train;
  TokenDataset val;
  std::vector<TextSourceStats> sources;  // per source, in config order
  // One or two lines for the log: sources, files, documents, tokens and samples of each split.
  std::string summary(int64_t seq_len) const;
};

// Collects documents, then splits and tokenizes them (byte tokenizer).
class DatasetBuilder {
 public:
  void add_document(std::string_view doc);
  int64_t num_documents() const { return static_cast<int64_t>(doc_begin_.size()); }
  // Assigns documents to splits: value < val_fraction goes to validation; when val_fraction > 0
  // and there are >= 2 documents, at least one document goes to each split (the lowest value
  // to validation, the highest to train). Throws UserError naming data.val_fraction unless it is
  // in [0, 1).
  DatasetSplits finish(double val_fraction);

 private:
  std::vector<int32_t> tokens_;     // every document's tokens, EOT included, in order
  std::vector<int64_t> doc_begin_;  // start of each document in tokens_
  std::vector<double> split_value_;
};

// Reads all sources and builds both splits. Throws UserError naming the key for a weight other
// than 1 (mixing is not supported yet), a tokenizer other than "bytes", seq_len < 1, any source
// problem, or a train split too small for one sample. An empty validation split is not an error
// here (evaluation may be off); EvalLoader checks it.
DatasetSplits build_datasets(const std::vector<TextSourceSpec>& sources,
                             const std::string& tokenizer, int64_t seq_len, double val_fraction);

// The same from train's DataConfig (any struct with sources, tokenizer, seq_len, val_fraction);
// a template so that src/data need not include src/train.
template <class D>
DatasetSplits build_datasets(const D& data) {
  std::vector<TextSourceSpec> specs;
  for (const auto& s : data.sources) specs.push_back(to_text_source_spec(s));
  return build_datasets(specs, data.tokenizer, data.seq_len, data.val_fraction);
}

}  // namespace lmt
