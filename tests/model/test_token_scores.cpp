// Transformer::forward_token_scores on the CPU backend (token_scores_check.h): every family's tiny
// model in f64 and f32, the head in chunks that do not divide the batch and in vocabulary tiles,
// and with LoRA adapters, against log_softmax of forward_logits on the same packed batch, and each
// packed document against the same document alone.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cli/test_seed.h"
#include "model/model_test_util.h"
#include "model/token_scores_check.h"

namespace lmt {
namespace {

TEST(TokenScores, EqualLogSoftmaxOfTheLogitsForEveryFamily) {
  const uint32_t seed = test::fresh_seed("TokenScores.EqualLogSoftmaxOfTheLogitsForEveryFamily");
  for (const test::Variant& v : test::variants())
    for (DType dt : {DType::f64, DType::f32})
      for (int64_t tile : {int64_t{0}, int64_t{4}}) {
        CpuBackend be;
        Transformer m(&be, v.cfg, dt);
        if (dt == DType::f64) {
          test::randomise(m, seed, 0.3);
        } else {
          const std::vector<float> w = test::random_floats(m.flat_size(), seed, 0.3);
          be.from_host(m.params_data(), w.data(), w.size() * sizeof(float));
        }
        m.set_loss_chunk_tokens(5);    // 26 tokens: 6 chunks, the last of 1
        m.set_loss(LossSpec{}, tile);  // 4: 3 tiles of 11 ids, the last clamped
        const std::string what = std::string(v.name) + " " + std::string(dtype_name(dt)) +
                                 " tile " + std::to_string(tile);
        SCOPED_TRACE("seed " + std::to_string(seed) + ", " + what);
        test::check_token_scores(m, seed, dt == DType::f64 ? 1e-12 : 1e-5,
                                 dt == DType::f64 ? 1e-9 : 1e-4, what);
      }
}

TEST(TokenScores, LoraAdaptersTakePart) {
  const uint32_t seed = test::fresh_seed("TokenScores.LoraAdaptersTakePart");
  CpuBackend be;
  Transformer m(&be, test::tiny("llama"), DType::f64);
  test::randomise(m, seed, 0.3);
  const std::vector<int32_t> ids = test::random_ids(9, 11, seed),
                             labels = test::random_ids(9, 11, seed + 1);
  const Transformer::TokenScores base = m.forward_token_scores(ids.data(), labels.data(), 1, 9);
  LoraSpec spec;
  spec.rank = 2;
  m.add_lora(spec, seed);
  std::vector<double> a(static_cast<size_t>(m.lora_flat_size()));
  fill_normal(a.data(), m.lora_flat_size(), 0.0, 0.5, seed, 3);  // B too: the adapters change y
  be.from_host(m.lora_data(), a.data(), a.size() * sizeof(double));
  test::check_token_scores(m, seed, 1e-12, 1e-9, "llama lora");
  const Transformer::TokenScores adapted = m.forward_token_scores(ids.data(), labels.data(), 1, 9);
  double diff = 0;
  for (size_t i = 0; i < base.logprob.size(); ++i)
    diff = std::max(diff, std::abs(adapted.logprob[i] - base.logprob[i]));
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace lmt
