// The processes of one training run, as the training loop sees them (mpirun's ranks; one process
// is rank 0 of 1 and changes nothing). One global program runs over every process's devices, so
// each process computes every step; what differs is the host side, decided here:
//
// - who feeds what: train.micro_batch_size is the global batch; rank r feeds rows
//   [r B / P, (r + 1) B / P) of it (the loader's rank slice), so the ranks' rows partition each
//   global batch and resume is exact whatever P is;
// - who writes: rank 0 alone writes config.yaml, metrics, checkpoints and a prepared data store;
//   the others wait for its outcome (a key it puts in the store: the result, or its error, which
//   they repeat), so a failed write stops every rank with rank 0's message;
// - what they agree on: the step's labelled tokens (each rank counts its rows; the sum scales
//   the gradient and divides the loss) and rank 0's choices (the checkpoint resumed from).
//
// The exchanges go through the run's DirectoryStore (parallel/directory_store.h), whose
// heartbeats end a wait with a message naming a lost rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/directory_store.h"
#include "parallel/process_group.h"
#include "train/run_config.h"

namespace lmt {

class RunProcesses {
 public:
  // How long a rank waits for the others' part of an exchange: rank 0 writing a checkpoint of a
  // large model, a rank still compiling its first step. A lost rank ends the wait much sooner
  // (DirectoryStore::kLostAfter), naming it.
  static constexpr std::chrono::seconds kWaitLimit{3600};

  // One process: no store. Several (the launcher's environment): the checks of a run across
  // processes (train.backend pjrt, train.micro_batch_size a multiple of the count), then the
  // store in parallel.coordination_dir (default <train.out_dir>/coordination), joined.
  explicit RunProcesses(const RunConfig& cfg);
  // A group given (tests; a single process): no store when it has one process.
  RunProcesses(const ProcessGroup& group, const std::string& coordination_dir,
               std::chrono::seconds timeout);

  const ProcessGroup& group() const { return group_; }
  bool writer() const { return group_.rank == 0; }
  // Null for one process; the backend's client takes it (BackendOptions::store).
  const std::shared_ptr<DirectoryStore>& store() const { return store_; }

  // This rank's rows of a global batch of `batch` rows: how many, and the first.
  int64_t rows(int64_t batch) const { return batch / group_.count; }
  int64_t first_row(int64_t batch) const { return rows(batch) * group_.rank; }

  // `value` summed over every rank (each calls it, in the same order).
  int64_t sum(const std::string& what, int64_t value);
  // A stop signal reaches the ranks at different points of a step, so they may stop at different
  // steps: one waiting in sum for the next step's tokens, another for rank 0's final checkpoint.
  // Once `stopping` says a signal arrived, a sum that has waited kStopGrace gives up (a
  // UserError saying so) instead of waiting for a rank that will not come.
  static constexpr std::chrono::seconds kStopGrace{5};
  void give_up_when(std::function<bool()> stopping) { stopping_ = std::move(stopping); }
  // Rank 0 runs `write` and tells the others its result (or its error); every rank returns that
  // result, and a failure on rank 0 is a UserError on every rank. Each calls it, in the same
  // order; `what` names it in messages ("checkpoint at step 20").
  std::string by_writer(const std::string& what, const std::function<std::string()>& write);

 private:
  std::string next_key(const std::string& what);  // "lmt/<serial>/<what>"

  ProcessGroup group_;
  std::shared_ptr<DirectoryStore> store_;
  std::function<bool()> stopping_;
  int64_t serial_ = 0;  // the exchanges so far: each one's keys are its own
  // Keys this rank put since the sum before the last: every rank has read them once every rank
  // has reached the next sum, which then removes them.
  std::vector<std::string> unread_, read_;
};

// The directory several processes meet in: parallel.coordination_dir, or
// <train.out_dir>/coordination.
std::string coordination_dir(const RunConfig& cfg);

}  // namespace lmt
