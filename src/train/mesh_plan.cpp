// Collectives of the plan (model/sharding_plan.h) per training step, by ring algorithms: over n
// devices an all-gather or a reduce-scatter of a whole of S bytes sends (n - 1) / n S from each
// device, an all-reduce twice that.
#include "train/mesh_plan.h"

#include <algorithm>

#include "model/sharding_plan.h"
#include "model/param_layout.h"
#include "train/flops.h"

namespace lmt {
namespace {

double ring(int64_t n) { return n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0; }

struct Sizes {
  int64_t layer_fsdp = 0;  // one layer's fsdp-split parameters, whole over fsdp (tensor-split)
  // Tables gathered whole over fsdp: the head (the embedding where tied) and gpt2's positions.
  // An untied token embedding is not: its looked-up rows move instead (step_collectives).
  int64_t tables = 0;
  int64_t tensor_local = 0;  // every parameter split by tensor only
  int64_t device_local = 0;  // every parameter as a device holds it
  // The token and position tables and an untied head, split by tensor only and as a device
  // holds them: their gradients are made in f32 (a scatter-add of the looked-up rows' gradients,
  // the head's product's f32 result) and reduced so.
  int64_t tables_tensor_local = 0, tables_device_local = 0;
  // Of those, split by tensor only: the head (the token table where tied) and an untied token
  // table, whose gradient is made in the table's own split (its rows' gradients move back).
  int64_t head_tensor_local = 0, head_device_local = 0, tokens_tensor_local = 0;
  int64_t matmul = 0;        // parameters in matrix products (flops.h)
};

Sizes sizes_of(const ModelConfig& cfg, const Mesh& mesh) {
  Mesh tensor_only = mesh;
  for (MeshAxis& a : tensor_only.axes)
    if (a.name != "tensor") a.size = 1;
  Sizes s;
  for (const ParamInfo& p : param_layout(cfg)) {
    const std::vector<int64_t> dims = p.shape.dims();
    const TensorSharding sh = plan_sharding(p.name, dims);
    int64_t whole = 1, local = 1;
    bool by_fsdp = false;
    for (size_t i = 0; i < dims.size(); ++i) {
      const int64_t kt = shard_count(tensor_only, sh, i), k = shard_count(mesh, sh, i);
      whole *= dims[i] % kt == 0 ? dims[i] / kt : dims[i];
      local *= dims[i] % k == 0 ? dims[i] / k : dims[i];
      if (i < sh.size())
        for (const std::string& a : sh[i]) by_fsdp |= a == "fsdp";
    }
    s.tensor_local += whole;
    s.device_local += local;
    const bool layer0 = p.name.find(".layers.0.") != std::string::npos || p.name.rfind("h.0.", 0) == 0;
    const bool tokens = p.name == "model.embed_tokens.weight" || p.name == "transformer.wte.weight";
    const bool table = (p.kind == ParamKind::embedding && (!tokens || cfg.tie_word_embeddings)) ||
                       p.name == "lm_head.weight";
    if (p.kind == ParamKind::embedding || p.name == "lm_head.weight")
      s.tables_tensor_local += whole, s.tables_device_local += local;
    if (p.name == "lm_head.weight" || (tokens && cfg.tie_word_embeddings))
      s.head_tensor_local += whole, s.head_device_local += local;
    else if (tokens)
      s.tokens_tensor_local += whole;
    if (by_fsdp && layer0) s.layer_fsdp += whole;
    if (by_fsdp && table) s.tables += whole;
    s.matmul += p.numel();
  }
  if (!cfg.tie_word_embeddings) s.matmul -= cfg.vocab_size * cfg.hidden_size;
  if (cfg.traits().learned_positions) s.matmul -= cfg.max_position_embeddings * cfg.hidden_size;
  return s;
}

// The bytes of `all` gradients of which `tables` are f32 and the rest in `es` bytes each.
double gradient_bytes(int64_t all, int64_t tables, double es) {
  return static_cast<double>(all - tables) * es + static_cast<double>(tables) * 4;
}

}  // namespace

std::vector<Collective> step_collectives(const ModelConfig& cfg, const StepShape& shape,
                                         const Mesh& mesh) {
  const int64_t d = mesh.axis_size("data"), f = mesh.axis_size("fsdp"),
                t = mesh.axis_size("tensor");
  const int64_t L = cfg.num_hidden_layers;
  const Sizes s = sizes_of(cfg, mesh);
  const double es = shape.bf16 ? 2 : 4;  // weights and activations cross in the compute dtype
  const double N = static_cast<double>(shape.micro_batch / (d * f) * shape.seq_len);
  std::vector<Collective> c;
  auto add = [&](const char* key, const char* what, const char* axis, int64_t count,
                 double bytes, bool exposed) {
    if (count > 0 && bytes > 0)
      c.push_back({key, what, axis, count, static_cast<uint64_t>(bytes), exposed});
  };
  // The loss head on split rows (head_loss.cpp): vocabulary-parallel unless the cut loss walks
  // the vocabulary in tiles. Then the head is split by vocabulary over the rows' axes (an
  // all-to-all over fsdp, and back for its gradient), each loss chunk's rows are gathered and their
  // gradients reduce-scattered, and the head's gradient needs no reduction of its own.
  const int64_t G = d * f, V = cfg.vocab_size, C = cfg.hidden_size;
  const bool cut = shape.vocab_tile > 0 && shape.vocab_tile < V;
  const bool by_vocab = G > 1 && !cut && V % (G * t) == 0;
  const int64_t head_fsdp = by_vocab ? s.head_tensor_local : 0;  // not gathered, not reduced
  if (by_vocab) {
    const int64_t n = shape.micro_batch / G * shape.seq_len;
    const int64_t c = std::max<int64_t>(1, std::min(shape.loss_chunk, n)), chunks = (n + c - 1) / c;
    const double rows = static_cast<double>(chunks * (G - 1) * c * C);
    const char* axes = d > 1 && f > 1 ? "data+fsdp" : f > 1 ? "fsdp" : "data";
    add("loss_rows_gather", "all-gather of each loss chunk's rows (vocabulary-parallel head)",
        axes, chunks, rows * es, false);
    add("loss_rows_reduce_scatter", "reduce-scatter of each loss chunk's row gradients (f32)",
        axes, chunks, rows * 4, false);
    add("fsdp_head_to_vocab",
        "all-to-all of the head to a vocabulary split, and of its gradient back", "fsdp", 2,
        2 * ring(f) * static_cast<double>(s.head_tensor_local / f) * es, false);
    add("data_head_gradient_gather", "all-gather of the head's gradient (vocabulary-split)",
        "data", 1, ring(d) * static_cast<double>(s.head_device_local) * es, false);
  }
  if (f > 1) {
    const double layer = ring(f) * static_cast<double>(s.layer_fsdp) * es;
    const double tables = ring(f) * static_cast<double>(s.tables - head_fsdp) * es;
    add("fsdp_gather_forward", "all-gather of each layer's weights, forward", "fsdp", L,
        L * layer, false);
    add("fsdp_gather_backward", "all-gather of each layer's weights, backward", "fsdp", L,
        L * layer, false);
    if (shape.checkpointing)
      add("fsdp_gather_recompute", "all-gather of each layer's weights, recomputation", "fsdp", L,
          L * layer, false);
    add("fsdp_gather_tables",
        by_vocab ? "all-gather of the position table, forward and backward"
                 : "all-gather of the head (tied: the embedding), forward and backward",
        "fsdp", 2, 2 * tables, false);
    // The embedding table is split by hidden over fsdp: a device looks up its hidden slice of
    // every token's row, and XLA moves the rows (and, backward, their gradients) to the devices
    // that hold those tokens, rather than gather the table.
    add("fsdp_lookup_rows", "all-to-all of the looked-up embedding rows, forward and backward",
        "fsdp", 2, 2 * ring(f) * N * static_cast<double>(cfg.hidden_size) * es, false);
    // Gradients are reduced in the compute dtype, as the weight-gradient products make their
    // partial sums, before each is widened into the f32 update (step_memory.h counts them so);
    // the tables' in f32 (Sizes). Not an untied token table's (its rows' gradients come back by
    // the lookup's all-to-all), nor an untied vocabulary-parallel head's (each device sums its own
    // ids' over every row); a tied table's lookup gradient still is.
    const bool head_own = by_vocab && !cfg.tie_word_embeddings;
    const int64_t own = s.tokens_tensor_local + (head_own ? s.head_tensor_local : 0);
    add("fsdp_reduce_scatter", "reduce-scatter of every gradient", "fsdp", head_own ? L : L + 1,
        ring(f) * gradient_bytes(s.tensor_local - own, s.tables_tensor_local - own, es), false);
  }
  if (d > 1) {
    const int64_t head = by_vocab ? s.head_device_local : 0;
    add("data_all_reduce", "all-reduce of every gradient shard", "data", 1,
        2 * ring(d) * gradient_bytes(s.device_local - head, s.tables_device_local - head, es),
        false);
  }
  if (t > 1) {
    // Row-parallel o_proj and down_proj sum their partial outputs in the forward; the
    // column-parallel q|k|v and gate|up sum their input gradients in the backward; the
    // vocabulary-split embedding and head add one each. The outputs cross in the compute dtype;
    // the input gradients in f32, as the backward's products make them (bf16 operands, f32
    // results: XLA's GPU compiler sums them so; libtpu was seen to sum them in bf16).
    const double rows = 2 * ring(t) * N * static_cast<double>(cfg.hidden_size);
    add("tensor_all_reduce_forward", "all-reduce of attention and MLP outputs, forward",
        "tensor", 2 * L + 1, (2 * L + 1) * rows * es, true);
    add("tensor_all_reduce_backward", "all-reduce of attention and MLP input gradients (f32)",
        "tensor", 2 * L + 1, (2 * L + 1) * rows * 4, true);
    // An untied token table's lookup, its vocabulary split by tensor: each tensor device adds
    // every looked-up row's gradient into the whole vocabulary of its fsdp slice, and the f32
    // sums are reduce-scattered back to the vocabulary split.
    if (s.tokens_tensor_local > 0)
      add("tensor_token_table_reduce_scatter", "reduce-scatter of the token table's gradient (f32)",
          "tensor", 1, ring(t) * static_cast<double>(s.tokens_tensor_local * t / f) * 4, false);
    if (shape.checkpointing)
      add("tensor_all_reduce_recompute", "all-reduce of attention and MLP outputs, recomputation",
          "tensor", 2 * L, 2 * L * rows * es, true);
  }
  return c;
}

StepTime estimate_step_time(const ModelConfig& cfg, const StepShape& shape, const Mesh& mesh,
                            const std::vector<Collective>& collectives, const DeviceSpec& device,
                            double mfu) {
  const Sizes s = sizes_of(cfg, mesh);
  const double tokens = static_cast<double>(shape.micro_batch * shape.seq_len);
  StepTime st;
  st.flops_per_device = train_flops_per_token(cfg, shape.seq_len, s.matmul) * tokens /
                        static_cast<double>(mesh.size());
  st.compute_s = st.flops_per_device / (device.bf16_flops * mfu);
  for (const Collective& c : collectives)
    (c.exposed ? st.exposed_s : st.overlapped_s) += static_cast<double>(c.bytes) / device.link_bytes;
  st.step_s = std::max(st.compute_s, st.overlapped_s) + st.exposed_s;
  st.tokens_per_s_per_device = tokens / static_cast<double>(mesh.size()) / st.step_s;
  return st;
}

MeshFit smallest_fitting_mesh(const ModelConfig& cfg, StepShape shape, int64_t per_device_batch,
                              const DeviceSpec& device, int64_t max_devices) {
  auto divisors = [](int64_t n, int64_t cap) {
    std::vector<int64_t> v;
    for (int64_t k = 1; k <= std::min(n, cap); ++k)
      if (n % k == 0) v.push_back(k);
    return v;
  };
  MeshFit best;
  double best_rate = 0;  // tokens/s a device: among meshes of one size, the faster
  for (int64_t t : divisors(cfg.num_attention_heads, max_devices)) {
    if (cfg.kv_heads() % t || cfg.intermediate_size % t || cfg.vocab_size % t) continue;
    for (int64_t f : divisors(cfg.hidden_size, max_devices / t)) {
      if (best.found && f * t > best.mesh.size()) break;
      const Mesh mesh{{{"data", 1}, {"fsdp", f}, {"tensor", t}}};
      shape.micro_batch = per_device_batch * f;
      const StepMemory m = step_memory(cfg, shape, mesh, StepTarget::accelerator);
      if (m.total_bytes() > device.memory) continue;
      const double rate =
          estimate_step_time(cfg, shape, mesh, step_collectives(cfg, shape, mesh), device, 0.5)
              .tokens_per_s_per_device;
      if (!best.found || f * t < best.mesh.size() || rate > best_rate)
        best = {true, mesh, m, shape.micro_batch}, best_rate = rate;
      break;  // a larger fsdp with this tensor only adds devices
    }
  }
  return best;
}

}  // namespace lmt
