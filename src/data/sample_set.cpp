#include "data/sample_set.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace lmt {

SampleSet::SampleSet(const std::string& dir, const Manifest& m, bool validation, int64_t seq_len,
                     int64_t vocab_size)
    : name_(validation ? "validation" : "train"), seq_len_(seq_len) {
  LMT_CHECK(seq_len >= 1);
  for (const SourceManifest& s : m.sources) {
    const ShardInfo& shard = validation ? s.validation : s.train;
    if (shard.prefix.empty()) continue;  // no such shard (a Megatron store has no validation)
    const std::filesystem::path prefix = shard.prefix;
    TokenStore store(
        (prefix.is_absolute() ? prefix : std::filesystem::path(dir) / prefix).string());
    if (store.num_documents() != shard.documents || store.num_tokens() != shard.tokens)
      throw UserError(store.prefix() + ": holds " + std::to_string(store.num_documents()) +
                      " documents / " + std::to_string(store.num_tokens()) +
                      " tokens, the manifest says " + std::to_string(shard.documents) + " / " +
                      std::to_string(shard.tokens));
    if (!m.dtype.empty() && m.dtype != store_dtype_name(store.dtype()))
      throw UserError(store.prefix() + ".idx: holds " + store_dtype_name(store.dtype()) +
                      " tokens, the manifest says " + m.dtype);
    if (shard.has_mask && !store.has_mask())
      throw UserError(store.prefix() +
                      ".mask: missing, but the manifest says the shard has a "
                      "loss mask (without it every token, prompts included, would count in the "
                      "loss)");
    if (vocab_size > 0 && store.max_token_id() >= vocab_size)
      throw UserError(store.prefix() + ".bin: holds token id " +
                      std::to_string(store.max_token_id()) + ", not below model.vocab_size " +
                      std::to_string(vocab_size));
    std::vector<int64_t> lengths(static_cast<size_t>(store.num_documents()));
    for (int64_t d = 0; d < store.num_documents(); ++d) lengths[d] = store.document_length(d);
    plans_.emplace_back(lengths, 0, store.num_documents(), seq_len,
                        parse_packing_mode(s.packing, "packing of " + s.path));
    stores_.push_back(std::move(store));
    weights_.push_back(s.weight);
    offsets_.push_back(offsets_.back() + plans_.back().num_samples());
  }
}

int64_t SampleSet::dropped_documents() const {
  int64_t n = 0;
  for (const auto& p : plans_) n += p.dropped_documents();
  return n;
}

void SampleSet::fill(int64_t id, int32_t* ids, int32_t* labels, int32_t* positions,
                     std::vector<int32_t>* doc_starts) const {
  LMT_CHECK(id >= 0 && id < num_samples(), "sample " + std::to_string(id) + " of " + name_);
  const int src =
      static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), id) - offsets_.begin()) -
      1;
  const auto& plan = plans_[static_cast<size_t>(src)];
  fill_sample(stores_[static_cast<size_t>(src)], plan.pieces(id - offsets_[src]), seq_len_, ids,
              labels, positions, doc_starts);
}

void SampleSet::require_samples() const {
  if (num_samples() > 0) return;
  int64_t tokens = 0, docs = 0;
  for (const auto& s : stores_) {
    tokens += s.num_tokens();
    docs += s.num_documents();
  }
  std::string hint = name_ == "validation" ? "add documents, or lower data.seq_len or raise "
                                             "data.val_fraction (0 turns evaluation data off)"
                                           : "add documents or lower data.seq_len";
  const int64_t dropped = dropped_documents();
  const std::string why =
      dropped > 0
          ? "; bin packing never splits a document, and " + std::to_string(dropped) +
                " of them are longer than seq_len + 1 = " + std::to_string(seq_len_ + 1) + " tokens"
          : "";
  throw UserError("data: the " + name_ + " split has " + std::to_string(tokens) + " tokens (" +
                  std::to_string(docs) + " documents); data.seq_len = " + std::to_string(seq_len_) +
                  " needs at least " + std::to_string(seq_len_ + 1) + " tokens for one sample" +
                  why + ": " + hint);
}

double SampleSet::unigram_entropy() const {
  std::vector<int64_t> counts;
  int64_t n = 0;
  std::vector<int32_t> buf;
  for (const auto& s : stores_) {
    for (int64_t d = 0; d < s.num_documents(); ++d) {
      buf.resize(static_cast<size_t>(s.document_length(d)));
      s.read(d, 0, static_cast<int64_t>(buf.size()), buf.data());
      for (int32_t t : buf) {
        if (static_cast<size_t>(t) >= counts.size()) counts.resize(static_cast<size_t>(t) + 1);
        ++counts[static_cast<size_t>(t)];
        ++n;
      }
    }
  }
  double h = 0.0;
  for (int64_t c : counts)
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  return h;
}

void SampleSet::check_unchanged() const {
  for (const TokenStore& s : stores_) s.check_unchanged();
}

}  // namespace lmt
