// Incremental decoding with a KV cache (batch 1): the same kernels as training, with keys and
// values of past positions kept per layer so each new token costs one row of work per layer.
#include <cmath>

#include "core/error.h"
#include "model/transformer.h"

namespace lmt {

std::unique_ptr<KvCache> Transformer::make_kv_cache(int64_t max_len) const {
  auto c = std::make_unique<KvCache>();
  c->max_len = max_len;
  const size_t row = static_cast<size_t>(dims_.KV) * es_;
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
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw UserError("generate: token id " + std::to_string(ids[i]) +
                      " is outside the vocabulary");
  const auto& [C, F, V, Q, KV, QKV, Hq, Hkv, D] = dims_;
  const int64_t past = cache.length;
  auto e = [&](int64_t k) { return static_cast<size_t>(k) * es_; };

  Buffer ids_d(be_, sizeof(int32_t) * n), pos_d(be_, sizeof(int32_t) * n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(past + i);
  be_->from_host(ids_d.data(), ids, sizeof(int32_t) * n);
  be_->from_host(pos_d.data(), pos.data(), sizeof(int32_t) * n);
  // One working set for every layer (h1 and h2, rstd1 and rstd2 share storage).
  Buffer x(be_, e(n * C)), h(be_, e(n * C)), rstd(be_, e(n)), qkv(be_, e(n * QKV));
  Buffer att(be_, e(n * Q)), lse(be_, e(n * Hq)), mid(be_, e(n * C)), gu(be_, e(n * 2 * F));
  Buffer act(be_, e(n * F));
  const LayerActs a{h.data(),   rstd.data(), qkv.data(),  att.data(), lse.data(),
                    mid.data(), h.data(),    rstd.data(), gu.data(),  act.data()};
  AttentionArgs args;
  args.batch = 1;
  args.q_len = n;
  args.kv_len = past + n;
  args.q_offset = past;
  args.num_heads = Hq;
  args.num_kv_heads = Hkv;
  args.head_dim = D;
  args.q_row_stride = QKV;
  args.q_batch_stride = n * QKV;
  args.kv_row_stride = KV;  // keys and values come from the cache rows
  args.kv_batch_stride = cache.max_len * KV;
  args.out_row_stride = Q;
  args.out_batch_stride = n * Q;
  args.scale = 1.0 / std::sqrt(static_cast<double>(D));
  args.window = cfg_.sliding_window;

  be_->embedding_forward(dt_, x.data(), ids_d.as<int32_t>(), weights_.data(), n, C);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights w = layer_weights(l, false);
    block_qkv(w, a, x.data(), pos_d.as<int32_t>(), n);
    for (int64_t i = 0; i < n; ++i) {
      be_->copy(at(cache.k[l].data(), (past + i) * KV), at(qkv.data(), i * QKV + Q), e(KV));
      be_->copy(at(cache.v[l].data(), (past + i) * KV), at(qkv.data(), i * QKV + Q + KV), e(KV));
    }
    block_rest(w, a, x.data(), x.data(), n, args, cache.k[l].data(), cache.v[l].data());
  }
  cache.length += n;
  // Only the last position's logits are needed.
  const ParamInfo& norm = params_[1 + per_layer() * static_cast<size_t>(cfg_.num_hidden_layers)];
  const ParamInfo& head = cfg_.tie_word_embeddings ? params_.front() : params_.back();
  void* last = at(x.data(), (n - 1) * C);
  be_->rmsnorm_forward(dt_, h.data(), rstd.data(), last, at(weights_.data(), norm.offset), 1, C,
                       cfg_.rms_norm_eps, 0.0);
  Buffer logits(be_, e(V));
  be_->gemm(dt_, false, true, 1, V, C, 1.0, h.data(), C, at(weights_.data(), head.offset), C, 0.0,
            logits.data(), V);
  std::vector<float> out(static_cast<size_t>(V));
  if (dt_ == DType::f32) {
    be_->to_host(out.data(), logits.data(), out.size() * 4);
  } else {
    std::vector<double> d(out.size());
    be_->to_host(d.data(), logits.data(), d.size() * 8);
    for (size_t i = 0; i < d.size(); ++i) out[i] = static_cast<float>(d[i]);
  }
  return out;
}

}  // namespace lmt
