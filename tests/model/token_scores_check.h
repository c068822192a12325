// The model-level check of Transformer::forward_token_scores that the CPU tests (test_token_scores)
// and the PJRT tests (tests/pjrt/test_token_scores_pjrt.cpp) share: on a packed batch (two rows of
// several documents, positions restarting, ignored labels at the boundaries), each position's
// score equals log_softmax of forward_logits (same backend, same batch) at its label, its greedy
// flag the argmax's (where the top two logits are apart by more than `flag_gap`), and each
// document run alone gives its packed scores (but with dynamic RoPE).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "model/transformer.h"

namespace lmt::test {

// The largest |logprob - reference| over the batch and over the documents alone.
struct TokenScoreErrors {
  double vs_logits = 0, vs_alone = 0;
};

inline TokenScoreErrors check_token_scores(Transformer& m, uint32_t seed, double tol,
                                           double flag_gap, const std::string& what) {
  const int64_t B = 2, T = 13, V = m.config().vocab_size, N = B * T;
  const std::vector<std::vector<int64_t>> docs = {{4, 6, 3}, {7, 6}};
  std::vector<int32_t> ids = random_ids(N, V, seed), labels = random_ids(N, V, seed + 1);
  std::vector<int32_t> pos, start;
  for (int64_t b = 0; b < B; ++b) {
    int64_t at = 0;
    for (int64_t len : docs[b]) {
      for (int64_t i = 0; i < len; ++i) {
        pos.push_back(static_cast<int32_t>(i));
        start.push_back(static_cast<int32_t>(at));
      }
      labels[b * T + at + len - 1] = Transformer::kIgnoreIndex;  // no label across a boundary
      at += len;
    }
  }
  labels[2] = Transformer::kIgnoreIndex;  // and one inside a document
  const Transformer::Packing packing{pos.data(), start.data()};
  const Transformer::TokenScores got =
      m.forward_token_scores(ids.data(), labels.data(), B, T, &packing);
  const std::vector<double> logits = m.forward_logits(ids.data(), B, T, &packing);
  EXPECT_EQ(got.logprob.size(), static_cast<size_t>(N)) << what;
  EXPECT_EQ(got.greedy.size(), static_cast<size_t>(N)) << what;
  if (got.logprob.size() != static_cast<size_t>(N)) return {};
  TokenScoreErrors e;
  int compared_flags = 0, greedy = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (labels[i] == Transformer::kIgnoreIndex) {
      EXPECT_EQ(got.logprob[i], 0.0) << what << ": ignored position " << i;
      EXPECT_EQ(got.greedy[i], 0) << what << ": ignored position " << i;
      continue;
    }
    const double* z = &logits[i * V];
    double mx = -INFINITY, second = -INFINITY;
    int64_t arg = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (z[j] > mx)
        second = mx, mx = z[j], arg = j;
      else if (z[j] > second)
        second = z[j];
    }
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    const double want = z[labels[i]] - mx - std::log(sum);
    e.vs_logits = std::max(e.vs_logits, std::fabs(got.logprob[i] - want));
    EXPECT_NEAR(got.logprob[i], want, tol) << what << ": position " << i;
    if (mx - second > flag_gap) {
      ++compared_flags;
      greedy += arg == labels[i];
      EXPECT_EQ(got.greedy[i], arg == labels[i] ? 1 : 0) << what << ": position " << i;
    }
  }
  EXPECT_GT(compared_flags, N / 2) << what;
  // Each document alone. Not with dynamic RoPE: its base follows the longest position of the
  // batch (transformers' too), so a document's rotation depends on its neighbours.
  if (m.config().rope_type == "dynamic") return e;
  for (int64_t b = 0; b < B; ++b) {
    int64_t at = 0;
    for (int64_t len : docs[b]) {
      const int64_t o = b * T + at;
      const Transformer::TokenScores alone = m.forward_token_scores(&ids[o], &labels[o], 1, len);
      for (int64_t i = 0; i < len; ++i) {
        e.vs_alone = std::max(e.vs_alone, std::fabs(alone.logprob[i] - got.logprob[o + i]));
        EXPECT_NEAR(alone.logprob[i], got.logprob[o + i], tol) << what << ": position " << o + i;
        EXPECT_EQ(alone.greedy[i], got.greedy[o + i]) << what << ": position " << o + i;
      }
      at += len;
    }
  }
  std::printf(
      "%-40s max |logprob - log_softmax(forward_logits)| %.3g, packed vs alone %.3g (%d "
      "greedy of %d flags compared)\n",
      what.c_str(), e.vs_logits, e.vs_alone, greedy, compared_flags);
  return e;
}

}  // namespace lmt::test
