#include "train/train_data.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "data/prepare.h"

namespace lmt {

namespace fs = std::filesystem;

void check_manifest(const Manifest& m, const std::string& dir, const RunConfig& cfg) {
  const std::string where = "data.store '" + dir + "'";
  if (m.vocab_size > cfg.model.vocab_size)
    throw UserError(fmt::format(
        "{}: its tokenizer ({}) has {} ids but model.vocab_size is {}: the model must have at "
        "least as many embeddings as the store has ids",
        where, m.tokenizer, m.vocab_size, cfg.model.vocab_size));
  if (m.seq_len != cfg.data.seq_len)
    throw UserError(fmt::format(
        "{}: prepared for seq_len {}, but data.seq_len is {} (prepare it again with this "
        "data.seq_len, or set data.seq_len: {})",
        where, m.seq_len, cfg.data.seq_len, m.seq_len));
  if (m.tokenizer_hash == "unknown") return;  // a Megatron store does not say
  const std::string fp = tokenizer_fingerprint(cfg.data.tokenizer);
  if (fp != m.tokenizer_hash)
    throw UserError(fmt::format(
        "{}: prepared with tokenizer '{}' ({}), but data.tokenizer is '{}' ({}): the token ids "
        "would mean different things; prepare the data with this tokenizer or name the one it "
        "was prepared with",
        where, m.tokenizer, m.tokenizer_hash, cfg.data.tokenizer, fp));
}

TrainData open_train_data(const RunConfig& cfg, bool reuse_prepared) {
  TrainData td;
  if (!cfg.data.store.empty()) {
    td.dir = cfg.data.store;
  } else {
    td.dir = (fs::path(cfg.train.out_dir) / "data").string();
    bool reuse = false;
    if (reuse_prepared && has_manifest(td.dir)) {
      Manifest old = read_manifest(td.dir);
      reuse = old.seq_len == cfg.data.seq_len &&
              old.tokenizer_hash == tokenizer_fingerprint(cfg.data.tokenizer) &&
              old.sources.size() == cfg.data.sources.size();
    }
    if (!reuse) {
      prepare_store(prepare_options(cfg.data, td.dir));
      td.prepared_now = true;
    }
  }
  if (!has_manifest(td.dir) && is_megatron_prefix(td.dir)) {
    td.manifest = megatron_manifest(td.dir, cfg.data.seq_len);
    td.megatron = true;
  } else {
    td.manifest = read_manifest(td.dir);
  }
  check_manifest(td.manifest, td.dir, cfg);
  verify_store_checksums(td.dir, td.manifest);
  td.fingerprint = store_fingerprint(td.manifest);
  td.train = std::make_unique<SampleSet>(td.dir, td.manifest, false, cfg.data.seq_len,
                                         cfg.model.vocab_size);
  td.validation = std::make_unique<SampleSet>(td.dir, td.manifest, true, cfg.data.seq_len,
                                              cfg.model.vocab_size);
  return td;
}

}  // namespace lmt
