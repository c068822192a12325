#include "eval/heldout.h"

#include <cmath>

#include "data/prepare.h"
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

}  // namespace lmt::eval
