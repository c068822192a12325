// The data side of a training run: the token store named by data.store (or one prepared into
// <out_dir>/data when data.store is empty, or a Megatron-LM PREFIX used as it is), checked against the model and config before any
// step, and opened as train and validation sample sets.
#pragma once

#include <memory>
#include <string>

#include "data/manifest.h"
#include "data/sample_set.h"
#include "train/run_config.h"

namespace lmt {

struct TrainData {
  std::string dir;
  Manifest manifest;
  bool prepared_now = false;
  bool megatron = false;  // data.store named a Megatron-LM PREFIX (no manifest, no validation)
  std::string fingerprint;  // store_fingerprint: what the store holds
  std::unique_ptr<SampleSet> train, validation;
};

// Throws UserError saying what does not match: the store's vocabulary is larger than
// model.vocab_size, its seq_len differs from data.seq_len, or data.tokenizer is not the tokenizer
// the store was prepared with.
void check_manifest(const Manifest& m, const std::string& dir, const RunConfig& cfg);

// Every shard file is checked against the checksums prepare recorded (verify_store_checksums).
// reuse_prepared: when data.store is empty and <out_dir>/data already holds a store prepared from
// the same data section (a resumed run), use it instead of preparing again.
TrainData open_train_data(const RunConfig& cfg, bool reuse_prepared);

}  // namespace lmt
