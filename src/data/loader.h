// Batches for training and evaluation. The training order is the infinite sequence
// P_0 ++ P_1 ++ ... of per-epoch permutations of the sample indices, P_e a Fisher-Yates shuffle
// driven by Rng(seed, kLoaderStream + e): a pure function of (seed, epoch, number of samples), so
// it is the same on every machine and after every resume. Each next() consumes the next global
// batch of micro_batch * world entries of that sequence; rank r takes entries
// [r * micro_batch, (r + 1) * micro_batch) of it. A global batch may span an epoch boundary: it
// then holds the tail of epoch e and the head of epoch e + 1 (the sequence just continues), so one
// rank with micro_batch 2m reads exactly the union of what two ranks with micro_batch m read.
// The position is (seed, epoch, index in the epoch's permutation); restoring it resumes exactly.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/token_dataset.h"

namespace lmt {

struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // next entry of the epoch's permutation, in [0, num_samples)
  bool operator==(const LoaderState&) const = default;
};

void to_json(nlohmann::json& j, const LoaderState& s);    // {"seed", "epoch", "index"}
void from_json(const nlohmann::json& j, LoaderState& s);  // throws UserError on a bad object

// Philox stream offset of the shuffle (keeps it apart from the streams parameter init uses).
constexpr uint64_t kLoaderStream = 0x4c4f414400000000ull;  // "LOAD" << 32

// The permutation of [0, n) for one epoch.
std::vector<int64_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n);

class Loader {
 public:
  // `data` must outlive the loader. Throws UserError when data has no sample of seq_len + 1.
  Loader(const TokenDataset& data, int64_t seq_len, int64_t micro_batch, uint64_t seed,
         int rank = 0, int world = 1);

  // Fills ids[micro_batch, seq_len] and labels[micro_batch, seq_len] with this rank's slice of
  // the next global batch.
  void next(int32_t* ids, int32_t* labels);
  // Advances like next() and returns this rank's sample indices instead of copying samples.
  std::vector<int64_t> next_indices();

  LoaderState get_state() const { return {seed_, epoch_, index_}; }
  // Throws UserError when index is outside this dataset's epoch (the data changed).
  void set_state(const LoaderState& s);

  int64_t num_samples() const { return num_samples_; }
  int64_t micro_batch() const { return micro_batch_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t epoch() const { return epoch_; }

 private:
  void ensure_permutation();
  // Consumes one global batch; appends this rank's sample indices to `mine`.
  void advance(std::vector<int64_t>& mine);

  const TokenDataset& data_;
  int64_t seq_len_, micro_batch_, num_samples_;
  int rank_, world_;
  uint64_t seed_;
  int64_t epoch_ = 0, index_ = 0;
  int64_t perm_epoch_ = -1;  // epoch whose permutation perm_ holds
  std::vector<int64_t> perm_;
};

// Evaluation batches: samples 0, 1, 2, ... of the split in order, unshuffled, wrapping around to
// sample 0 when an evaluation asks for more than the split holds. Global batches and rank slices
// as in Loader. reset() starts over, so every evaluation sees the same batches.
class EvalLoader {
 public:
  // Throws UserError (naming the split and seq_len) when data has no sample.
  EvalLoader(const TokenDataset& data, int64_t seq_len, int64_t micro_batch, int rank = 0,
             int world = 1);

  void next(int32_t* ids, int32_t* labels);
  void reset() { position_ = 0; }
  int64_t num_samples() const { return num_samples_; }
  // Global batches that cover every sample once (the last one may wrap).
  int64_t batches_per_pass() const;

 private:
  const TokenDataset& data_;
  int64_t seq_len_, micro_batch_, num_samples_;
  int rank_, world_;
  int64_t position_ = 0;  // global entries consumed since reset()
};

}  // namespace lmt
