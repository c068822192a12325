#include "eval/heldout.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/token_store.h"
#include "data/schema.h"

namespace lmt::eval {

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
    HeldoutScore score;
    score.source = spec.path;
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<uint8_t>> masks;
    // Scored a batch of documents at a time, so that memory holds one batch's tokens.
    auto flush = [&] {
      if (ids.empty()) return;
      for (double ll : lm.loglikelihood_rolling_masked(ids, masks)) score.nll -= ll;
      ids.clear(), masks.clear();
      if (progress) progress(score.documents, static_cast<int64_t>(i));
    };
    for_each_source_document(spec, static_cast<int>(i), [&](Document&& doc) {
      if (limit && score.documents >= *limit) return;
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
      int64_t targets = 0;
      for (uint8_t x : m) targets += x;
      if (targets == 0) return;
      ++score.documents;
      score.tokens += targets;
      score.bytes += bytes;
      ids.push_back(std::move(d));
      masks.push_back(std::move(m));
      if (ids.size() >= 256) flush();
    });
    flush();
    out.push_back(score);
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
    HeldoutScore score;
    score.source = src.path;
    const TokenStore store((std::filesystem::path(store_dir) / src.validation.prefix).string());
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<uint8_t>> masks;
    auto flush = [&] {
      if (ids.empty()) return;
      for (double ll : lm.loglikelihood_rolling_masked(ids, masks)) score.nll -= ll;
      ids.clear(), masks.clear();
      if (progress) progress(score.documents, static_cast<int64_t>(i));
    };
    for (int64_t d = 0; d < store.num_documents(); ++d) {
      if (limit && score.documents >= *limit) break;
      const int64_t n = store.document_length(d);
      std::vector<int32_t> doc(static_cast<size_t>(n));
      std::vector<uint8_t> mask(static_cast<size_t>(n));
      store.read(d, 0, n, doc.data(), mask.data());
      std::vector<int32_t> text;  // the loss tokens but the tokenizer's special ones
      int64_t targets = 0;
      for (int64_t k = 0; k < n; ++k) {
        targets += mask[static_cast<size_t>(k)];
        const int32_t id = doc[static_cast<size_t>(k)];
        if (mask[static_cast<size_t>(k)] && id != tok.bos_id() && id != tok.eos_id())
          text.push_back(id);
      }
      if (targets == 0) continue;
      ++score.documents;
      score.tokens += targets;
      score.bytes += static_cast<int64_t>(tok.decode(text).size());
      ids.push_back(std::move(doc));
      masks.push_back(std::move(mask));
      if (ids.size() >= 256) flush();
    }
    flush();
    out.push_back(score);
  }
  return out;
}

}  // namespace lmt::eval
