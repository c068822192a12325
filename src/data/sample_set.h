// One split (train or validation) of a token store as numbered samples. Each source's shard is
// packed on its own (data/packing.h: continue for pretraining text, bin for instruction/chat, as
// the manifest says), and the split's samples are the sources' samples one after another: global
// sample id = the source's offset + the sample's number in that source. The loader decides the
// order (and, for training, how often each source is drawn: its weight).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/packing.h"
#include "data/token_store.h"

namespace lmt {

class SampleSet {
 public:
  // Opens the split's shards of the store in `dir` (manifest `m`) and plans seq_len samples. Each
  // shard must be what the manifest says (documents, tokens, token dtype, a .mask where it says
  // one) and, when vocab_size > 0, hold no id at or above it: a UserError naming the file
  // otherwise, before any sample is read.
  SampleSet(const std::string& dir, const Manifest& m, bool validation, int64_t seq_len,
            int64_t vocab_size = 0);

  const std::string& name() const { return name_; }  // "train" or "validation"
  int64_t seq_len() const { return seq_len_; }
  int64_t num_samples() const { return offsets_.back(); }
  int num_sources() const { return static_cast<int>(plans_.size()); }
  int64_t source_samples(int i) const { return offsets_[i + 1] - offsets_[i]; }
  int64_t source_offset(int i) const { return offsets_[i]; }
  double weight(int i) const { return weights_[i]; }
  int64_t dropped_documents() const;  // bin packing: documents longer than seq_len + 1

  // Sample `id` (global): ids/labels/positions[seq_len], doc_starts (see fill_sample).
  void fill(int64_t id, int32_t* ids, int32_t* labels, int32_t* positions,
            std::vector<int32_t>* doc_starts) const;

  // Throws UserError when the split has no sample: names the split, its tokens and what seq_len
  // needs.
  void require_samples() const;
  // TokenStore::check_unchanged for each store read.
  void check_unchanged() const;
  // Entropy of the split's unigram token distribution, nats per token (0 when empty): a model that
  // learned anything beyond token frequencies has a loss below this.
  double unigram_entropy() const;

 private:
  std::string name_;
  int64_t seq_len_;
  std::vector<TokenStore> stores_;
  std::vector<PackingPlan> plans_;
  std::vector<double> weights_;
  std::vector<int64_t> offsets_{0};  // prefix sums of the sources' sample counts
};

}  // namespace lmt
