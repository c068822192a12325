// Batches for training and evaluation, read from a token store's split (data/sample_set.h).
// The training order is the infinite sequence O_0 ++ O_1 ++ ... of per-epoch orders, O_e the
// weighted mix of the sources' samples shuffled by (seed, e) (data/mixture.h): a pure function of
// (seed, epoch, the sources' sample counts and weights), so it is the same on every machine and
// after every resume. Each batch consumes the next global batch of micro_batch * world entries;
// rank r takes entries [r * micro_batch, (r + 1) * micro_batch) of it. A global batch may span an
// epoch boundary (the sequence just continues), so one rank with micro_batch 2m reads exactly the
// union of what two ranks with micro_batch m read.
//
// A prefetch thread assembles the next batches while the trainer computes, so a step never waits
// for the store. The position is (seed, epoch, index in the epoch's order) of the last batch
// handed out; restoring it resumes exactly.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "data/sample_set.h"

namespace lmt {

struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // next entry of the epoch's order, in [0, num_samples)
  bool operator==(const LoaderState&) const = default;
};

void to_json(nlohmann::json& j, const LoaderState& s);    // {"seed", "epoch", "index"}
void from_json(const nlohmann::json& j, LoaderState& s);  // throws UserError on a bad object

// One rank's micro-batch.
struct Batch {
  std::vector<int32_t> ids, labels, positions;   // [micro_batch, seq_len] (data/packing.h)
  std::vector<std::vector<int32_t>> doc_starts;  // per row: where its documents start
  std::vector<int64_t> samples;                  // per row: the global sample id
  LoaderState after;                             // the loader's state once this batch is taken
};

// Per-token attention layout of rows [rows, seq_len] from each row's document starts: doc_start[j]
// = the start of token j's document, positions[j] = j - doc_start[j] (positions restart at every
// document start in the sample, also for a document continued from an earlier sample).
void packed_layout(const std::vector<std::vector<int32_t>>& starts, int64_t seq_len,
                   int32_t* doc_start, int32_t* positions);

class Loader {
 public:
  // `data` must outlive the loader. Throws UserError when data has no sample. prefetch = number
  // of batches assembled ahead on a background thread (0: assembled in next()).
  Loader(const SampleSet& data, int64_t micro_batch, uint64_t seed, int rank = 0, int world = 1,
         int prefetch = 2);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's slice of the next global batch; valid until the next call.
  const Batch& next();
  // The same, copied into ids[micro_batch, seq_len] and labels[micro_batch, seq_len].
  void next(int32_t* ids, int32_t* labels);

  LoaderState get_state() const { return state_; }
  // Throws UserError when index is outside this split's epoch (the data changed).
  void set_state(const LoaderState& s);

  int64_t num_samples() const { return data_.num_samples(); }
  int64_t micro_batch() const { return micro_batch_; }
  int64_t seq_len() const { return data_.seq_len(); }

 private:
  // The deterministic sequence itself, advanced by whoever assembles batches.
  struct Cursor {
    LoaderState pos;
    int64_t order_epoch = -1;
    std::vector<int64_t> order;
  };
  Batch assemble(Cursor& c) const;
  void start();  // (re)starts the prefetch thread from state_
  void stop();
  void produce();

  const SampleSet& data_;
  std::vector<int64_t> source_sizes_;   // samples per source, and
  std::vector<double> source_weights_;  // weights: the inputs of every epoch's order
  int64_t micro_batch_;
  int rank_, world_, prefetch_;
  LoaderState state_;
  Batch current_;

  Cursor cursor_;  // owned by the producer while it runs
  std::thread producer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
};

// Evaluation batches: samples 0, 1, 2, ... of the split in order, unshuffled and unmixed,
// wrapping around to sample 0 when an evaluation asks for more than the split holds. Global
// batches and rank slices as in Loader. reset() starts over, so every evaluation sees the same
// batches.
class EvalLoader {
 public:
  // Throws UserError (naming the split and seq_len) when data has no sample.
  EvalLoader(const SampleSet& data, int64_t micro_batch, int rank = 0, int world = 1);
  // Only source `source`'s samples of the split (per-source validation).
  EvalLoader(const SampleSet& data, int64_t micro_batch, int source, int rank, int world);

  // With doc_start / positions given (each [micro_batch, seq_len]), also the packed layout.
  void next(int32_t* ids, int32_t* labels, int32_t* doc_start = nullptr,
            int32_t* positions = nullptr);
  void reset() { position_ = 0; }
  int64_t num_samples() const { return end_ - begin_; }
  // Global batches that cover every sample once (the last one may wrap).
  int64_t batches_per_pass() const;

 private:
  const SampleSet& data_;
  int64_t micro_batch_;
  int rank_, world_;
  void shuffle_order();
  int64_t begin_ = 0, end_ = 0;  // the samples it reads: [begin_, end_) of the split
  // Its fixed order: a permutation of [0, end_ - begin_) drawn once from a constant seed, so that
  // any prefix of a pass (train.eval_steps) samples every source, not the first one's samples.
  std::vector<int64_t> order_;
  int64_t position_ = 0;  // global entries consumed since reset()
};

}  // namespace lmt
