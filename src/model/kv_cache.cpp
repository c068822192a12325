// Incremental decoding with a KV cache (batch 1): the same block functions as training, with
// keys and values of past positions kept per layer so each new token costs one row of work per
// layer.
#include <cmath>

#include "core/error.h"
#include "model/transformer.h"

namespace lmt {

std::unique_ptr<KvCache> Transformer::make_kv_cache(int64_t max_len) const {
  auto c = std::make_unique<KvCache>();
  c->max_len = max_len;
  const size_t row = static_cast<size_t>(dims_.KV) * dtype_size(compute_dt_);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    c->k.emplace_back(be_, row * static_cast<size_t>(max_len));
    c->v.emplace_back(be_, row * static_cast<size_t>(max_len));
  }
  return c;
}

std::vector<float> Transformer::feed(KvCache& cache, const int32_t* ids, int64_t n) {
  LMT_CHECK(n >= 1, "feed needs at least one token");
  if (cache.length + n > cache.max_len)
    throw UserError("generate: " + std::to_string(cache.length + n) +
                    " tokens exceed the KV cache of " + std::to_string(cache.max_len) +
                    " (max_position_embeddings or --max-new-tokens)");
  if (traits_.learned_positions && cache.length + n > cfg_.max_position_embeddings)
    throw UserError("generate: " + std::to_string(cache.length + n) +
                    " tokens exceed max_position_embeddings (" +
                    std::to_string(cfg_.max_position_embeddings) + ")");
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw UserError("generate: token id " + std::to_string(ids[i]) +
                      " is outside the vocabulary");
  const ModelDims& d = dims_;
  const int64_t C = d.C, V = d.V, Q = d.Q, KV = d.KV, QKV = d.QKV;
  const int64_t past = cache.length;
  auto e = [&](int64_t k) { return static_cast<size_t>(k) * dtype_size(compute_dt_); };

  Buffer ids_d(be_, sizeof(int32_t) * n), pos_d(be_, sizeof(int32_t) * n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(past + i);
  be_->from_host(ids_d.data(), ids, sizeof(int32_t) * n);
  be_->from_host(pos_d.data(), pos.data(), sizeof(int32_t) * n);
  set_rope(past + n);
  weights_.to_compute();
  Buffer x(be_, e(n * C)), scratch(be_, e(n * C)), arena;
  const LayerActs a = ActivationPlan::one_layer(be_, cfg_, compute_dt_, arena, n);
  embed(x.data(), ids_d.as<int32_t>(), pos_d.as<int32_t>(), scratch.data(), n);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    AttentionArgs args = attention_args(l, 1, n);
    args.kv_len = past + n;
    args.q_offset = past;
    args.kv_row_stride = KV;  // keys and values come from the cache rows
    args.kv_batch_stride = cache.max_len * KV;
    args.doc_start = nullptr;
    const LayerWeights w = layer_weights(l, false);
    block_qkv(l, w, a, x.data(), pos_d.as<int32_t>(), n);
    for (int64_t i = 0; i < n; ++i) {
      be_->copy(at(cache.k[l].data(), (past + i) * KV), at(a.qkv, i * QKV + Q), e(KV));
      be_->copy(at(cache.v[l].data(), (past + i) * KV), at(a.qkv, i * QKV + Q + KV), e(KV));
    }
    block_rest(w, a, x.data(), x.data(), n, args, cache.k[l].data(), cache.v[l].data());
  }
  cache.length += n;
  // Only the last position's logits are needed.
  const size_t ss = stat_size(compute_dt_);
  Buffer h(be_, e(C)), stats(be_, 2 * ss);
  final_norm(h.data(), stats.data(), static_cast<char*>(stats.data()) + ss,
             at(x.data(), (n - 1) * C), 1);
  Buffer logits(be_, e(V));
  head_forward(h.data(), logits.data(), 1);
  const std::vector<double> out = host_logits(logits.data(), V);
  return std::vector<float>(out.begin(), out.end());
}

}  // namespace lmt
