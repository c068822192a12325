#include "eval/heldout.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/token_store.h"
#include "data/schema.h"

namespace lmt::eval {

namespace {

// One source's documents, scored a batch at a time (memory holds one batch's tokens).
class SourceScorer {
 public:
  SourceScorer(HarnessLM& lm, std::string source, int64_t index, const Progress& progress)
      : lm_(lm), index_(index), progress_(progress) {
    score_.source = std::move(source);
  }
  int64_t documents() const { return score_.documents; }
  // A document's tokens and their loss mask, and the bytes of its text in the loss; one with no
  // target is not counted.
  void add(std::vector<int32_t> ids, std::vector<uint8_t> mask, int64_t bytes) {
    int64_t targets = 0;
    for (uint8_t x : mask) targets += x;
    if (targets == 0) return;
    ++score_.documents;
    score_.tokens += targets;
    score_.bytes += bytes;
    ids_.push_back(std::move(ids));
    masks_.push_back(std::move(mask));
    if (ids_.size() >= 256) flush();
  }
  HeldoutScore finish() {
    flush();
    return score_;
  }

 private:
  void flush() {
    if (ids_.empty()) return;
    for (double ll : lm_.loglikelihood_rolling_masked(ids_, masks_)) score_.nll -= ll;
    ids_.clear(), masks_.clear();
    if (progress_) progress_(score_.documents, index_);
  }
  HarnessLM& lm_;
  int64_t index_;
  const Progress& progress_;
  HeldoutScore score_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<std::vector<uint8_t>> masks_;
};

}  // namespace

double HeldoutScore::perplexity() const { return std::exp(loss()); }

double HeldoutScore::bits_per_byte() const {
  return bytes > 0 ? nll / std::log(2.0) / static_cast<double>(bytes) : 0.0;
}

std::vector<HeldoutScore> score_heldout(HarnessLM& lm, const Tokenizer& tok,
                                        const std::vector<TextSourceSpec>& sources,
                                        double val_fraction, std::optional<int64_t> limit,
                                        const Progress& progress) {
  std::vector<HeldoutScore> out;
  for (size_t i = 0; i < sources.size(); ++i) {
    const TextSourceSpec& spec = sources[i];
    const bool text_schema = spec.schema == "text";
    SourceScorer scorer(lm, spec.path, static_cast<int64_t>(i), progress);
    for_each_source_document(spec, static_cast<int>(i), [&](Document&& doc) {
      if (limit && scorer.documents() >= *limit) return;
      std::string all;
      int64_t bytes = 0;
      for (const Segment& s : doc.segments) {
        all += s.text;
        if (s.loss) bytes += static_cast<int64_t>(s.text.size());
      }
      if (val_fraction > 0 && !(document_split_value(all) < val_fraction)) return;
      std::vector<int32_t> d;
      std::vector<uint8_t> m;
      tokenize_document(tok, doc, text_schema, d, m);
      scorer.add(std::move(d), std::move(m), bytes);
    });
    out.push_back(scorer.finish());
  }
  return out;
}

std::vector<HeldoutScore> score_store_heldout(HarnessLM& lm, const Tokenizer& tok,
                                              const std::string& tokenizer_spec,
                                              const std::string& store_dir,
                                              std::optional<int64_t> limit,
                                              const Progress& progress) {
  const Manifest m = read_manifest(store_dir);
  const std::string model_tok = tokenizer_fingerprint(tokenizer_spec);
  if (m.tokenizer_hash != model_tok)
    throw UserError("--data " + store_dir + ": the store was tokenized with " + m.tokenizer +
                    " (" + m.tokenizer_hash + "), not the model's tokenizer (" + model_tok +
                    "): its ids would mean other text");
  std::vector<HeldoutScore> out;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    const SourceManifest& src = m.sources[i];
    SourceScorer scorer(lm, src.path, static_cast<int64_t>(i), progress);
    const TokenStore store((std::filesystem::path(store_dir) / src.validation.prefix).string());
    for (int64_t d = 0; d < store.num_documents(); ++d) {
      if (limit && scorer.documents() >= *limit) break;
      const int64_t n = store.document_length(d);
      std::vector<int32_t> doc(static_cast<size_t>(n));
      std::vector<uint8_t> mask(static_cast<size_t>(n));
      store.read(d, 0, n, doc.data(), mask.data());
      std::vector<int32_t> text;  // the loss tokens but the tokenizer's special ones
      for (int64_t k = 0; k < n; ++k) {
        const int32_t id = doc[static_cast<size_t>(k)];
        if (mask[static_cast<size_t>(k)] && id != tok.bos_id() && id != tok.eos_id())
          text.push_back(id);
      }
      const auto bytes = static_cast<int64_t>(tok.decode(text).size());
      scorer.add(std::move(doc), std::move(mask), bytes);
    }
    out.push_back(scorer.finish());
  }
  return out;
}

}  // namespace lmt::eval
