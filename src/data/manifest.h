// manifest.json of a token store: what `lmtrain prepare` made, from what, with which tokenizer,
// so that `lmtrain train` can check the store against its model and config before a step runs,
// and a person can see what is in it. One store holds, per source, a train and a validation
// shard (Megatron-LM .bin/.idx, plus .mask when some tokens are not loss targets).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lmt {

struct ShardInfo {
  std::string prefix;  // file prefix relative to the store directory, e.g. "train-00000"
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t loss_tokens = 0;  // tokens whose mask is 1
  bool has_mask = false;
  // The checksums (core/checksum.h) of its files by extension (".bin", ".idx", ".mask"), as
  // prepare wrote them; empty in a store from before checksums and in a Megatron-LM store, whose
  // checksums verify_store_checksums computes instead.
  std::map<std::string, std::string> checksums;
};

struct SourceManifest {
  std::string path, format, schema;
  double weight = 1.0;
  std::string packing;  // continue | bin
  int64_t files = 0;
  int64_t documents = 0;  // records read (before skipping)
  int64_t bytes = 0;
  int64_t skipped = 0;
  std::map<std::string, int64_t> skipped_by_reason;
  ShardInfo train, validation;
};

struct Manifest {
  static constexpr int kVersion = 1;
  std::string tokenizer;       // as the config named it ("bytes", a file or a directory)
  std::string tokenizer_kind;  // bytes | bpe | unigram | sentencepiece
  std::string tokenizer_hash;  // tokenizer_fingerprint()
  int64_t vocab_size = 0;
  int64_t seq_len = 0;
  double val_fraction = 0;
  std::string dtype;  // uint16 | int32
  std::vector<SourceManifest> sources;
  double prepare_seconds = 0;

  int64_t tokens(bool validation) const;
  int64_t documents(bool validation) const;
};

// "bytes", or "fnv1a64:<hex>" of the tokenizer file's bytes (tokenizer.json, else tokenizer.model
// for a directory). Throws UserError when the file cannot be read.
std::string tokenizer_fingerprint(const std::string& spec);

// The extensions of a shard's files: .bin, .idx and, with a mask, .mask.
std::vector<std::string> shard_extensions(const ShardInfo& s);

// Computes the checksum of every shard file of the store in `dir` into m (prepare).
void record_store_checksums(const std::string& dir, Manifest& m);
// Checks every shard file of the store in `dir` against the checksums m recorded: a file that
// changed since prepare is a UserError naming it. Where m recorded none (see ShardInfo), the
// checksums are computed into m. Reads the whole store (docs/guarantees.md says what it costs).
void verify_store_checksums(const std::string& dir, Manifest& m);
// What the store holds, as one "xxh3_128:..." of its shards' checksums (after one of the two
// above): equal for two stores of the same tokens, whatever their paths or preparation times.
std::string store_fingerprint(const Manifest& m);

// Writes DIR/manifest.json atomically (temporary file, then rename).
void write_manifest(const std::string& dir, const Manifest& m);
// Throws UserError naming DIR/manifest.json when it is missing, not JSON or lacks a field.
Manifest read_manifest(const std::string& dir);
bool has_manifest(const std::string& dir);

// A Megatron-LM / NeMo indexed dataset used as it is: PREFIX.bin + PREFIX.idx (no manifest). Its
// documents become one pretraining source (packing continue) with no validation shard; the
// vocabulary size is the largest id + 1 and the tokenizer is unknown ("megatron:PREFIX").
bool is_megatron_prefix(const std::string& prefix);
Manifest megatron_manifest(const std::string& prefix, int64_t seq_len);

}  // namespace lmt
