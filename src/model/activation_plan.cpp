// The activation arena's layout (see activation_plan.h): one carving, for measuring and for the
// real plan.
#include "model/activation_plan.h"

#include <algorithm>

#include "core/error.h"

namespace lmt {

namespace {

// Hands out 64-byte aligned regions of one arena; a dry run (base 0) only measures.
class ArenaCarver {
 public:
  explicit ArenaCarver(uintptr_t base) : base_(base) {}
  void* take(size_t bytes) {
    if (bytes == 0) return nullptr;
    size_t off = used_;
    used_ += (bytes + 63) / 64 * 64;
    return reinterpret_cast<void*>(base_ + off);
  }
  size_t used() const { return used_; }

 private:
  uintptr_t base_;
  size_t used_ = 0;
};

// What a layer keeps of its MLP's pre-activation for the backward.
enum class MlpKeeps { pre_activation, sign_mask, nothing };
MlpKeeps mlp_keeps(const ModelConfig& cfg, int activation_bits) {
  if (activation_bits != 1) return MlpKeeps::pre_activation;
  return cfg.hidden_act == "relu" ? MlpKeeps::sign_mask : MlpKeeps::nothing;
}

// One layer's saved activations for N tokens of B sequences, carved in a fixed order.
LayerActs carve_layer(ArenaCarver& c, const ModelConfig::Traits& t, const ModelDims& d, int64_t B,
                      int64_t T, size_t es, size_t ss, MlpKeeps keeps) {
  const int64_t N = B * T, C = d.C;
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es; };
  auto st = [&](int64_t n) { return static_cast<size_t>(n) * ss; };  // saved statistics
  LayerActs a{};
  a.h1 = c.take(e(N * C));
  a.mean1 = t.layernorm ? c.take(st(N)) : nullptr;
  a.rstd1 = c.take(st(N));
  a.qkv_raw = t.qk_norm ? c.take(e(N * d.QKV)) : nullptr;
  a.qk_rstd = t.qk_norm ? c.take(st(N * (d.Hq + d.Hkv))) : nullptr;
  a.qkv = c.take(e(N * d.QKV));
  a.att = c.take(e(N * d.Q));
  a.lse = c.take(st(B * d.Hq * T));
  a.o_raw = t.sandwich_norms ? c.take(e(N * C)) : nullptr;
  a.rstd_pa = t.sandwich_norms ? c.take(st(N)) : nullptr;
  a.x_mid = c.take(e(N * C));
  a.h2 = c.take(e(N * C));
  a.mean2 = t.layernorm ? c.take(st(N)) : nullptr;
  a.rstd2 = c.take(st(N));
  a.gu = keeps == MlpKeeps::pre_activation ? c.take(e(N * d.G)) : nullptr;  // else scratch
  a.a = c.take(e(N * d.F));
  a.mask = keeps == MlpKeeps::sign_mask ? c.take(sign_mask_bytes(N * d.F)) : nullptr;
  a.m_raw = t.sandwich_norms ? c.take(e(N * C)) : nullptr;
  a.rstd_pf = t.sandwich_norms ? c.take(st(N)) : nullptr;
  return a;
}

}  // namespace

ModelDims ModelDims::of(const ModelConfig& c) {
  const int Hq = static_cast<int>(c.num_attention_heads), Hkv = static_cast<int>(c.kv_heads());
  const int D = static_cast<int>(c.head_size());
  const int64_t G = c.traits().gated_mlp ? 2 * c.intermediate_size : c.intermediate_size;
  return ModelDims{c.hidden_size,
                   c.intermediate_size,
                   c.vocab_size,
                   int64_t{Hq} * D,
                   int64_t{Hkv} * D,
                   (int64_t{Hq} + 2 * int64_t{Hkv}) * D,
                   G,
                   Hq,
                   Hkv,
                   D};
}

size_t ActivationPlan::carve(uintptr_t base, const ModelConfig& cfg, DType dt,
                             const ActivationSettings& s) {
  const ModelConfig::Traits t = cfg.traits();
  const ModelDims d = ModelDims::of(cfg);
  const size_t es = dtype_size(dt), ss = stat_size(dt);
  const int64_t L = cfg.num_hidden_layers, C = d.C;
  ArenaCarver c(base);
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es; };
  auto st = [&](int64_t n) { return static_cast<size_t>(n) * ss; };
  auto ints = [&]() { return static_cast<int32_t*>(c.take(sizeof(int32_t) * N)); };
  ids = ints();
  labels = ints();
  pos = ints();
  doc_start = ints();
  for (int64_t l = 0; l <= L; ++l) res.push_back(c.take(e(N * C)));
  const int64_t layer_sets = checkpointing ? 1 : L;
  const MlpKeeps keeps = mlp_keeps(cfg, s.activation_bits);
  for (int64_t i = 0; i < layer_sets; ++i)
    sets.push_back(carve_layer(c, t, d, B, T, es, ss, keeps));
  hf = c.take(e(N * C));
  meanf = t.layernorm ? c.take(st(N)) : nullptr;
  rstdf = c.take(st(N));
  dx = c.take(e(N * C));
  dh = c.take(e(N * C));
  dqkv = c.take(e(N * d.QKV));
  datt = c.take(e(N * d.Q));
  dgu = c.take(e(N * d.G));
  da = c.take(e(N * d.F));
  for (LayerActs& a : sets)  // a pre-activation not kept lives in dgu, unused until the backward
    if (!a.gu) a.gu = dgu;
  const HeadLossScratch scratch = head_loss_scratch(chunk, cfg.vocab_size, s.loss_vocab_tile);
  logits = c.take(e(scratch.logits));
  losses = c.take(st(scratch.losses));
  return c.used();
}

size_t ActivationPlan::bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                             const ActivationSettings& s) {
  cfg.validate();
  ActivationPlan p;
  p.B = B, p.T = T, p.N = B * T;
  p.checkpointing = s.checkpointing;
  p.chunk = std::min<int64_t>(std::max<int64_t>(s.loss_chunk_tokens, 1), p.N);
  return p.carve(0, cfg, dt, s);
}

ActivationPlan::ActivationPlan(Backend* be, const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                               const ActivationSettings& s)
    : B(B), T(T), N(B * T), checkpointing(s.checkpointing) {
  chunk = std::min<int64_t>(std::max<int64_t>(s.loss_chunk_tokens, 1), N);
  const size_t planned = bytes(cfg, dt, B, T, s);
  arena = Buffer(be, planned);
  const size_t used = carve(reinterpret_cast<uintptr_t>(arena.data()), cfg, dt, s);
  LMT_CHECK(used == planned, "activation plan size mismatch");
  const std::pair<int32_t*, const char*> batch[] = {{ids, "batch.ids"},
                                                    {labels, "batch.labels"},
                                                    {pos, "batch.positions"},
                                                    {doc_start, "batch.doc_start"}};
  for (const auto& [at, name] : batch) be->describe(at, TensorDesc{name, DType::i32, {B, T}});
}

ActivationPlan::LayerBytes ActivationPlan::layer_bytes(const ModelConfig& cfg, DType dt, int64_t B,
                                                       int64_t T, int activation_bits) {
  cfg.validate();
  const ModelDims d = ModelDims::of(cfg);
  const size_t es = dtype_size(dt);
  const MlpKeeps keeps = mlp_keeps(cfg, activation_bits);
  ArenaCarver c(0);
  carve_layer(c, cfg.traits(), d, B, T, es, stat_size(dt), keeps);
  ArenaCarver pre(0);  // the same rounding to the carver's alignment
  if (keeps == MlpKeeps::pre_activation) pre.take(static_cast<size_t>(B * T * d.G) * es);
  if (keeps == MlpKeeps::sign_mask) pre.take(sign_mask_bytes(B * T * d.F));
  return {c.used(), pre.used()};
}

LayerActs ActivationPlan::one_layer(Backend* be, const ModelConfig& cfg, DType dt, Buffer& arena,
                                    int64_t n) {
  const ModelConfig::Traits t = cfg.traits();
  const ModelDims d = ModelDims::of(cfg);
  ArenaCarver measure(0);
  carve_layer(measure, t, d, 1, n, dtype_size(dt), stat_size(dt), MlpKeeps::pre_activation);
  arena = Buffer(be, measure.used());
  ArenaCarver c(reinterpret_cast<uintptr_t>(arena.data()));
  return carve_layer(c, t, d, 1, n, dtype_size(dt), stat_size(dt), MlpKeeps::pre_activation);
}

}  // namespace lmt
