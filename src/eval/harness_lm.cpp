#include "eval/harness_lm.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "eval/py_value.h"

namespace lmt::eval {

namespace {

// Text as Hugging Face tokenizers decodes it (Rust's String::from_utf8_lossy): every maximal
// invalid subpart of a UTF-8 sequence becomes one U+FFFD. lmtrain's byte-level decoding keeps
// such bytes (hf_decoder.h); the harness compares and cuts the text HF gives.
std::string utf8_lossy(const std::string& s) {
  std::string out;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      out += static_cast<char>(b), ++i;
      continue;
    }
    // The sequence's length and the range of its second byte (Unicode's table 3-7).
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b == 0xE0) n = 3, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) n = 3;
    else if (b == 0xED) n = 3, hi = 0x9F;
    else if (b == 0xF0) n = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) n = 4;
    else if (b == 0xF4) n = 4, hi = 0x8F;
    int k = 1;
    while (n > 0 && k < n && i + static_cast<size_t>(k) < s.size()) {
      const unsigned char c = byte(i + static_cast<size_t>(k));
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
      ++k;
    }
    if (n > 0 && k == n) {
      out.append(s, i, static_cast<size_t>(n));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += static_cast<size_t>(k);
  }
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

HarnessLM::HarnessLM(Transformer& model, const Tokenizer& tok, int64_t batch)
    : model_(model), tok_(tok), batch_(std::max<int64_t>(1, batch)) {
  max_length_ = model.config().max_position_embeddings;
  prefix_ = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
  if (prefix_ < 0)
    throw UserError(
        "eval: the tokenizer has neither a beginning- nor an end-of-sequence token, which "
        "scoring a text from its first token needs (lm-evaluation-harness's prefix token)");
}

// HFLM.tok_encode(text): the tokenizer's default special tokens, none where the text already
// starts with the prefix token's text.
std::vector<int32_t> HarnessLM::encode(const std::string& text) const {
  if (starts_with(text, tok_.decode({prefix_}))) return tok_.encode(text);
  return tok_.encode_with_special(text);
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> HarnessLM::encode_pair(
    const std::string& context, const std::string& continuation) const {
  // The context's trailing whitespace (Python's str.rstrip()) moves to the continuation.
  const std::string ctx = py_strip(context, std::nullopt, false, true);
  const std::string cont = context.substr(ctx.size()) + continuation;
  const std::vector<int32_t> whole = encode(ctx + cont);
  std::vector<int32_t> context_enc = encode(ctx);
  std::vector<int32_t> continuation_enc;
  if (context_enc.size() < whole.size())
    continuation_enc.assign(whole.begin() + static_cast<std::ptrdiff_t>(context_enc.size()),
                            whole.end());
  return {std::move(context_enc), std::move(continuation_enc)};
}

std::vector<LoglikelihoodResult> HarnessLM::score_rows(const std::vector<Row>& rows,
                                                       const Progress& progress) {
  const auto n = static_cast<int64_t>(rows.size());
  // Each row as the model sees it: (context + continuation)[-(max_length + 1):][:-1].
  std::vector<std::vector<int32_t>> inputs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (r.continuation.empty())
      throw UserError("eval: a continuation encodes to no tokens (an empty choice or target)");
    if (static_cast<int64_t>(r.continuation.size()) > max_length_)
      throw UserError(
          "eval: a continuation of " + std::to_string(r.continuation.size()) +
          " tokens is longer than the model's " + std::to_string(max_length_) + " positions");
    std::vector<int32_t> all = r.context;
    all.insert(all.end(), r.continuation.begin(), r.continuation.end());
    const auto total = static_cast<int64_t>(all.size());
    if (total > max_length_ + 1) {
      ++truncated_;
      all.erase(all.begin(), all.begin() + (total - max_length_ - 1));
    }
    all.pop_back();
    inputs[i] = std::move(all);
  }
  // Longest first, as the harness orders them: a batch's rows are then of similar length.
  std::vector<int64_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return inputs[static_cast<size_t>(a)].size() > inputs[static_cast<size_t>(b)].size();
  });
  std::vector<LoglikelihoodResult> out(rows.size());
  for (int64_t at = 0; at < n; at += batch_) {
    int64_t B = std::min(batch_, n - at);
    auto T = static_cast<int64_t>(inputs[static_cast<size_t>(order[at])].size());
    // A backend that compiles a program a shape (pjrt) sees few shapes: every batch full and
    // its length rounded up to a power of two (the rows padded, their padding unscored).
    const int64_t used = B;  // rows of requests; the rest padding
    if (!model_.backend()->incremental_decoding()) {
      B = batch_;
      int64_t p = 16;
      while (p < T) p *= 2;
      T = std::min(p, std::max(T, max_length_));
    }
    std::vector<int32_t> ids(static_cast<size_t>(B * T), 0),
        labels(static_cast<size_t>(B * T), Transformer::kIgnoreIndex);
    for (int64_t b = 0; b < used; ++b) {
      const auto i = static_cast<size_t>(order[at + b]);
      const std::vector<int32_t>& in = inputs[i];
      const std::vector<int32_t>& cont = rows[i].continuation;
      std::copy(in.begin(), in.end(), ids.begin() + b * T);
      // Position p predicts the token after it: the continuation's tokens are predicted by the
      // row's last cont.size() positions.
      const auto L = static_cast<int64_t>(in.size()), C = static_cast<int64_t>(cont.size());
      const std::vector<uint8_t>& mask = rows[i].mask;
      for (int64_t j = 0; j < C; ++j)
        if (mask.empty() || mask[static_cast<size_t>(j)])
          labels[static_cast<size_t>(b * T + L - C + j)] = cont[static_cast<size_t>(j)];
    }
    // Per position: log p(label) and whether the label is the argmax (the first of equal
    // maxima, as torch.argmax), computed on the backend (Backend::head_logprobs).
    const Transformer::TokenScores s =
        model_.forward_token_scores(ids.data(), labels.data(), B, T);
    for (int64_t b = 0; b < used; ++b) {
      LoglikelihoodResult r{0.0, true};
      for (int64_t t = 0; t < T; ++t) {
        const auto k = static_cast<size_t>(b * T + t);
        if (labels[k] == Transformer::kIgnoreIndex) continue;
        r.logprob += s.logprob[k];
        r.greedy = r.greedy && s.greedy[k];
      }
      out[static_cast<size_t>(order[at + b])] = r;
    }
    if (progress) progress(at + used, n);
  }
  return out;
}

std::vector<LoglikelihoodResult> HarnessLM::loglikelihood(
    const std::vector<LoglikelihoodRequest>& reqs, const Progress& progress) {
  std::vector<Row> rows;
  rows.reserve(reqs.size());
  for (const LoglikelihoodRequest& q : reqs) {
    Row r;
    if (q.context.empty()) {
      // The prefix token as the context, unless the continuation starts with it.
      r.continuation = tok_.encode(q.continuation);
      if (!r.continuation.empty() && r.continuation.front() == prefix_) {
        r.context.assign(r.continuation.begin(), r.continuation.begin() + 1);
        r.continuation.erase(r.continuation.begin());
      } else {
        r.context = {prefix_};
      }
    } else {
      std::tie(r.context, r.continuation) = encode_pair(q.context, q.continuation);
      // A context of nothing but spaces encodes to nothing (they move to the continuation):
      // the harness stops there (an assertion); it is conditioned on the prefix token here.
      if (r.context.empty()) r.context = {prefix_};
    }
    rows.push_back(std::move(r));
  }
  return score_rows(rows, progress);
}

std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> HarnessLM::rolling_windows(
    const std::vector<int32_t>& tokens, int32_t prefix, int64_t max_length) {
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> w;
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return w;
  auto slice = [&](int64_t from, int64_t to) {
    return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
  };
  // The first window predicts its every token, from the prefix token on.
  const int64_t first = std::min(max_length, n);
  std::vector<int32_t> input = {prefix};
  for (int64_t i = 0; i + 1 < first; ++i) input.push_back(tokens[static_cast<size_t>(i)]);
  w.emplace_back(std::move(input), slice(0, first));
  // Then max_length tokens a window (context_len 1: pred_len = max_length), each conditioned on
  // as much of what precedes it as fits.
  int64_t predicted = first;
  while (predicted < n) {
    const int64_t len = std::min(n - predicted, max_length);
    const int64_t end = predicted + len;
    w.emplace_back(slice(end - max_length - 1, end - 1), slice(end - len, end));
    predicted += len;
  }
  // make_disjoint_window: the input without the tokens it predicts, but the first of them.
  for (auto& [a, b] : w) a.resize(a.size() - (b.size() - 1));
  return w;
}

std::vector<double> HarnessLM::loglikelihood_rolling(const std::vector<std::string>& texts,
                                                     const Progress& progress) {
  std::vector<Row> rows;
  std::vector<size_t> owner;
  for (size_t i = 0; i < texts.size(); ++i)
    for (auto& [context, predicted] : rolling_windows(encode(texts[i]), prefix_, max_length_)) {
      rows.push_back({std::move(context), std::move(predicted)});
      owner.push_back(i);
    }
  const std::vector<LoglikelihoodResult> r = score_rows(rows, [&](int64_t done, int64_t total) {
    if (progress) progress(done * static_cast<int64_t>(texts.size()) / std::max<int64_t>(total, 1),
                           static_cast<int64_t>(texts.size()));
  });
  std::vector<double> out(texts.size(), 0.0);
  for (size_t k = 0; k < r.size(); ++k) out[owner[k]] += r[k].logprob;
  return out;
}

std::vector<double> HarnessLM::loglikelihood_rolling_masked(
    const std::vector<std::vector<int32_t>>& ids, const std::vector<std::vector<uint8_t>>& masks,
    const Progress& progress) {
  std::vector<Row> rows;
  std::vector<size_t> owner;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<int32_t> tokens = ids[i];
    std::vector<uint8_t> mask = masks[i];
    if (!tokens.empty() && tokens.front() == prefix_ && !mask.front()) {
      tokens.erase(tokens.begin());
      mask.erase(mask.begin());
    }
    size_t at = 0;  // where each window's predicted tokens start in `tokens`
    for (auto& [context, predicted] : rolling_windows(tokens, prefix_, max_length_)) {
      Row r{std::move(context), std::move(predicted), {}};
      r.mask.assign(mask.begin() + static_cast<std::ptrdiff_t>(at),
                    mask.begin() + static_cast<std::ptrdiff_t>(at + r.continuation.size()));
      at += r.continuation.size();
      // A window with no target scores nothing (a chat's system turn, say): not run at all.
      if (std::find(r.mask.begin(), r.mask.end(), 1) == r.mask.end()) continue;
      rows.push_back(std::move(r));
      owner.push_back(i);
    }
  }
  std::vector<double> out(ids.size(), 0.0);
  if (rows.empty()) return out;
  const std::vector<LoglikelihoodResult> r = score_rows(rows, [&](int64_t done, int64_t total) {
    if (progress) progress(done, total);
  });
  for (size_t k = 0; k < r.size(); ++k) out[owner[k]] += r[k].logprob;
  return out;
}

Transformer& HarnessLM::decoder() {
  if (model_.backend()->incremental_decoding()) return model_;
  if (!cpu_copy_) {
    cpu_ = make_backend("cpu");
    cpu_copy_ = model_.clone(cpu_.get());
  }
  return *cpu_copy_;
}

std::vector<std::string> HarnessLM::generate_until(const std::vector<GenerationRequest>& reqs,
                                                   const Progress& progress) {
  Transformer& model = decoder();
  std::vector<std::string> out;
  out.reserve(reqs.size());
  const int32_t eos = tok_.eos_id();
  const std::string eos_text = eos >= 0 ? tok_.decode({eos}) : std::string();
  for (const GenerationRequest& q : reqs) {
    std::vector<std::string> until = q.until;
    if (eos >= 0 && std::find(until.begin(), until.end(), eos_text) == until.end())
      until.push_back(eos_text);
    const int64_t max_ctx = max_length_ - q.max_gen_toks;
    if (max_ctx <= 0)
      throw UserError("eval: max_gen_toks " + std::to_string(q.max_gen_toks) +
                      " leaves no room for a context in the model's " +
                      std::to_string(max_length_) + " positions");
    // tok_batch_encode: the tokenizer's special tokens unless the text starts with BOS's text.
    const int32_t bos = tok_.bos_id();
    std::vector<int32_t> ctx = bos >= 0 && starts_with(q.context, tok_.decode({bos}))
                                   ? tok_.encode(q.context)
                                   : tok_.encode_with_special(q.context);
    if (static_cast<int64_t>(ctx.size()) > max_ctx) {
      ++truncated_;
      ctx.erase(ctx.begin(), ctx.end() - max_ctx);
    }
    if (ctx.empty()) ctx = {prefix_};
    // Greedy, with the KV cache, until EOS, max_gen_toks, or a stop sequence in the text.
    std::unique_ptr<KvCache> cache =
        model.make_kv_cache(static_cast<int64_t>(ctx.size()) + q.max_gen_toks);
    std::vector<float> logits = model.feed(*cache, ctx.data(), static_cast<int64_t>(ctx.size()));
    // The harness's stopping criterion: a stop sequence within the text, special tokens included,
    // of the last (its token count + 2) generated tokens.
    std::vector<size_t> lookback(until.size());
    for (size_t i = 0; i < until.size(); ++i) lookback[i] = tok_.encode(until[i]).size() + 2;
    std::vector<int32_t> gen;
    for (int64_t k = 0; k < q.max_gen_toks; ++k) {
      const auto next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (next == eos) break;
      gen.push_back(next);
      bool stop = false;
      for (size_t i = 0; i < until.size() && !stop; ++i) {
        if (until[i].empty()) continue;
        const size_t n = std::min(lookback[i], gen.size());
        const std::string tail = utf8_lossy(tok_.decode({gen.end() - static_cast<ptrdiff_t>(n), gen.end()}));
        stop = tail.find(until[i]) != std::string::npos;
      }
      if (stop || k + 1 == q.max_gen_toks) break;
      logits = model.feed(*cache, &next, 1);
    }
    // The text the harness scores: decoded without special tokens, cut at each stop sequence.
    std::string text = utf8_lossy(tok_.decode_skipping_special(gen));
    for (const std::string& u : until)
      if (!u.empty()) text = text.substr(0, text.find(u));
    out.push_back(std::move(text));
    if (progress) progress(static_cast<int64_t>(out.size()), static_cast<int64_t>(reqs.size()));
  }
  return out;
}

}  // namespace lmt::eval
