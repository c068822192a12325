// The language-model side of `lmtrain eval`: the three kinds of request lm-evaluation-harness
// makes of a model (loglikelihood of a continuation, rolling loglikelihood of a whole text,
// generation until a stop sequence), answered by an lmtrain model exactly as the harness's
// Hugging Face backend (HFLM, lm_eval/models/huggingface.py) answers them:
// - text to tokens as HFLM tokenizes: the tokenizer's own special tokens (HFLM's tok_encode
//   leaves add_special_tokens at the tokenizer's default), a context's trailing spaces moved to
//   its continuation, the context and the continuation split at the context's own encoding's
//   length (a token that straddles the boundary belongs to the continuation), an empty context
//   replaced by the prefix token (BOS, else EOS) unless the continuation starts with it;
// - context + continuation truncated from the left to max_length + 1 tokens, the last dropped
//   (the model sees max_length tokens), the continuation's log-probabilities summed, "greedy"
//   when every continuation token is the argmax of its logits (ties to the lowest id);
// - rolling windows of max_length tokens (get_rolling_token_windows, context 1, made disjoint),
//   the first conditioned on the prefix token;
// - greedy generation of at most max_gen_toks tokens after the context left-truncated to
//   max_length - max_gen_toks, stopped at EOS or once a stop sequence appears, the text cut at the
//   first occurrence of each stop sequence (EOS's text among them), as postprocess_generated_text;
//   where the model's backend does not decode a token at a time (pjrt: a program a shape), on a
//   copy of the model on the CPU backend, made once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "model/transformer.h"

namespace lmt::eval {

struct LoglikelihoodRequest {
  std::string context, continuation;
};

struct LoglikelihoodResult {
  double logprob = 0;
  bool greedy = false;
};

struct GenerationRequest {
  std::string context;
  std::vector<std::string> until;  // stop sequences (EOS's text is added)
  int64_t max_gen_toks = 256;
};

// Called as requests complete: (done, total).
using Progress = std::function<void(int64_t, int64_t)>;

class HarnessLM {
 public:
  // `batch`: rows scored together (one forward pass: [batch, longest row]).
  HarnessLM(Transformer& model, const Tokenizer& tok, int64_t batch);

  // The model's context length as HFLM resolves it (max_position_embeddings).
  int64_t max_length() const { return max_length_; }
  // BOS where the tokenizer has one, else EOS (HFLM.prefix_token_id).
  int32_t prefix_token() const { return prefix_; }

  // The harness's tokens of one request: (context, continuation), the context non-empty.
  std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_pair(
      const std::string& context, const std::string& continuation) const;

  std::vector<LoglikelihoodResult> loglikelihood(const std::vector<LoglikelihoodRequest>& reqs,
                                                 const Progress& progress = {});
  std::vector<double> loglikelihood_rolling(const std::vector<std::string>& texts,
                                            const Progress& progress = {});
  std::vector<std::string> generate_until(const std::vector<GenerationRequest>& reqs,
                                          const Progress& progress = {});

  // Held-out text (eval/heldout.h): the loglikelihood of each document's tokens whose mask is 1
  // (a loss target, as prepare masks them), scored as loglikelihood_rolling scores a text: the
  // first token is the context where it is the prefix token (BOS), else the prefix token is put
  // before it, then rolling windows of max_length.
  std::vector<double> loglikelihood_rolling_masked(const std::vector<std::vector<int32_t>>& ids,
                                                   const std::vector<std::vector<uint8_t>>& masks,
                                                   const Progress& progress = {});

  // Requests whose tokens were cut from the left to fit max_length (loglikelihood and
  // generation contexts), so far.
  int64_t truncated() const { return truncated_; }

  // Rolling windows of `tokens` (input, predicted), as the harness makes them
  // (get_rolling_token_windows with context_len 1, then make_disjoint_window).
  static std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> rolling_windows(
      const std::vector<int32_t>& tokens, int32_t prefix, int64_t max_length);

 private:
  struct Row {
    std::vector<int32_t> context, continuation;  // as encoded, before truncation
    std::vector<uint8_t> mask;  // per continuation token, 1: scored; empty: all scored
  };
  // Log-probability sums and greedy flags of rows (the last continuation.size() tokens of each
  // row's context + continuation are scored), batch rows at a time, longest first.
  std::vector<LoglikelihoodResult> score_rows(const std::vector<Row>& rows,
                                              const Progress& progress);
  std::vector<int32_t> encode(const std::string& text) const;
  // The model generation runs on: the model, or its copy on the CPU backend.
  Transformer& decoder();

  Transformer& model_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Transformer> cpu_copy_;
  const Tokenizer& tok_;
  int64_t batch_ = 1, max_length_ = 0;
  int32_t prefix_ = -1;
  int64_t truncated_ = 0;
};

}  // namespace lmt::eval
