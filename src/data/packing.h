// Packing: from documents of any length to samples of exactly seq_len + 1 tokens (ids are the
// first seq_len, labels the last seq_len). A plan is a pure function of the document lengths
// and seq_len, computed when the loader opens a store, so it costs O(documents) memory and the
// same store serves any packing.
//
//   continue: the documents of a range, back to back, cut every seq_len tokens (windows share one
//             token at their edges, so no label is lost); a document may run on into the next
//             sample. Pretraining. With T tokens in the range there are floor((T - 1) / seq_len)
//             samples (0 when T <= seq_len), as TokenDataset has; every sample is full, and the
//             tail after the last window (fewer than seq_len tokens) is left out and counted.
//   bin:      whole documents only: first-fit decreasing bin packing of documents into samples of
//             seq_len + 1 tokens, the rest padded (padding: token 0, label kNoLabel, its own segment).
//             A document longer than seq_len + 1 is not split: the plan leaves it out and counts
//             it. SFT. Documents are placed longest first (ties: lower document index first),
//             each into the lowest-numbered sample with room; samples are numbered in the order
//             they are opened, and a sample's pieces are in the order they were placed.
//
// Empty documents never appear in a plan (nor are they counted as dropped). A sample's pieces are
// found by a binary search over prefix sums (continue) or read from a CSR table (bin).
//
// Every sample says where each document in it starts, so attention can stay inside a document
// and positions can restart at 0; the store's loss mask decides which labels count.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/token_store.h"

namespace lmt {

enum class PackingMode { kContinue, kBin };

// The label of a position that is not a loss target: Hugging Face's ignore_index, and the
// model's Transformer::kIgnoreIndex.
constexpr int32_t kNoLabel = -100;

// "continue" or "bin"; throws UserError naming `key` otherwise.
PackingMode parse_packing_mode(const std::string& s, const std::string& key);

// A piece of a sample: `length` tokens of document `doc` from token `begin`.
struct SamplePiece {
  int64_t doc = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

class PackingPlan {
 public:
  // Plans documents [doc_begin, doc_end) of a store whose document lengths are given.
  PackingPlan(std::span<const int64_t> doc_lengths, int64_t doc_begin, int64_t doc_end,
              int64_t seq_len, PackingMode mode);

  int64_t num_samples() const;
  int64_t seq_len() const { return seq_len_; }
  PackingMode mode() const { return mode_; }
  // bin: documents longer than seq_len + 1 and their tokens; continue: the tail after the last
  // window (its tokens, and the documents wholly inside it).
  int64_t dropped_documents() const { return dropped_docs_; }
  int64_t dropped_tokens() const { return dropped_tokens_; }
  // In order; lengths > 0 summing to seq_len + 1 (continue) or <= seq_len + 1 (bin).
  std::vector<SamplePiece> pieces(int64_t sample) const;

 private:
  int64_t seq_len_;
  PackingMode mode_;
  int64_t dropped_docs_ = 0, dropped_tokens_ = 0;
  // continue: offsets_ = prefix sums of the range's document lengths (doc_begin_ + i);
  // bin: samples_ = CSR of document ids per sample.
  int64_t doc_begin_ = 0;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> sample_begin_, sample_docs_;
  std::vector<int64_t> doc_lengths_;  // bin: lengths of the range's documents
};

// One materialised sample.
//   ids[seq_len], labels[seq_len]: labels[j] = token j + 1 when its mask byte is 1, else kNoLabel;
//     padding has id 0 and label kNoLabel.
//   positions[seq_len]: position of token j inside its document (restarts at 0 at each start;
//     a piece that begins inside its document continues from its offset); padding counts 0, 1, ...
//   doc_starts: indices j in [0, seq_len) where a piece (or the padding run) begins; always
//     starts with 0.
// Thread-safe (the store's reads are).
void fill_sample(const TokenStore& store, const std::vector<SamplePiece>& pieces, int64_t seq_len,
                 int32_t* ids, int32_t* labels, int32_t* positions,
                 std::vector<int32_t>* doc_starts);

}  // namespace lmt
