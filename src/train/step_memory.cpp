// The terms of step_memory.h. Elements are counted per device: the batch's rows divided over
// data x fsdp, what the plan splits by tensor (heads, MLP features, vocabulary) divided by tensor.
#include "train/step_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "backend/attention_forms.h"
#include "core/error.h"
#include "model/sharding_plan.h"
#include "model/param_layout.h"

namespace lmt {
namespace {

// Optimizer moments a parameter carries: AdamW two, Lion and SGD one, Muon one for hidden
// matrices (its momentum) and AdamW's two for the rest.
int64_t moments_of(const ParamInfo& p, const std::string& optimizer) {
  if (optimizer == "adamw") return 2;
  if (optimizer == "muon")
    return p.kind == ParamKind::matrix && p.shape.rank() == 2 && p.name != "lm_head.weight" ? 1
                                                                                             : 2;
  return 1;
}

// Elements of one device's piece of `dims` split as s (a dimension the axes do not divide stays
// whole, as the plan says).
int64_t local_numel(const Mesh& mesh, const TensorSharding& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t k = shard_count(mesh, s, i);
    n *= dims[i] % k == 0 ? dims[i] / k : dims[i];
  }
  return n;
}

uint64_t u(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); }

}  // namespace

Mesh parse_mesh(const std::string& text, const std::string& flag) {
  Mesh mesh{{{"data", 1}, {"fsdp", 1}, {"tensor", 1}}};
  std::stringstream in(text);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    const std::string axis = eq == std::string::npos ? item : item.substr(0, eq);
    MeshAxis* a = nullptr;
    for (MeshAxis& m : mesh.axes)
      if (m.name == axis) a = &m;
    int64_t size = 0;
    try {
      size_t used = 0;
      if (eq != std::string::npos) size = std::stoll(item.substr(eq + 1), &used);
      if (eq == std::string::npos || used != item.size() - eq - 1) size = 0;
    } catch (const std::exception&) {
      size = 0;
    }
    if (!a || size < 1)
      throw UserError(fmt::format(
          "{} '{}': '{}' is not AXIS=SIZE with AXIS one of data, fsdp, tensor and SIZE >= 1 "
          "(e.g. {} data=2,fsdp=4,tensor=2)",
          flag, text, item, flag));
    a->size = size;
    any = true;
  }
  if (!any) throw UserError(fmt::format("{} is empty (e.g. {} fsdp=8)", flag, flag));
  return mesh;
}

void check_mesh(const ModelConfig& cfg, const Mesh& mesh, int64_t micro_batch,
                const std::string& flag) {
  const int64_t f = mesh.axis_size("fsdp"), t = mesh.axis_size("tensor");
  const int64_t rows = mesh.axis_size("data") * f;
  auto divides = [&](const char* axis, int64_t ways, const char* what, int64_t n) {
    if (n % ways != 0)
      throw UserError(fmt::format("{}: {}={} does not divide {} ({}); the sharding plan splits it "
                                  "over {}",
                                  flag, axis, ways, what, n, axis));
  };
  divides("fsdp", f, "hidden_size", cfg.hidden_size);
  divides("tensor", t, "num_attention_heads", cfg.num_attention_heads);
  divides("tensor", t, "num_key_value_heads", cfg.kv_heads());
  divides("tensor", t, "intermediate_size", cfg.intermediate_size);
  divides("tensor", t, "vocab_size", cfg.vocab_size);
  if (micro_batch % rows != 0)
    throw UserError(fmt::format("{}: data x fsdp = {} does not divide --micro-batch ({}): each of "
                                "those devices takes an equal share of the batch",
                                flag, rows, micro_batch));
}

ParamShards param_shards(const ModelConfig& cfg, const Mesh& mesh, const std::string& optimizer) {
  Mesh gathered = mesh;  // a layer's weights after the fsdp all-gather: split by tensor only
  for (MeshAxis& a : gathered.axes)
    if (a.name == "fsdp") a.size = 1;
  const std::string layer0 = ".layers.0.", gpt2_layer0 = "h.0.";
  ParamShards s;
  for (const ParamInfo& p : param_layout(cfg)) {
    const std::vector<int64_t> dims = p.shape.dims();
    const TensorSharding sh = plan_sharding(p.name, dims);
    const int64_t n = local_numel(mesh, sh, dims);
    s.total += n;
    s.moments += n * moments_of(p, optimizer);
    if (is_replicated(sh)) s.replicated += p.numel();
    if (p.name.find(layer0) != std::string::npos || p.name.rfind(gpt2_layer0, 0) == 0)
      s.layer_gathered += local_numel(gathered, sh, dims);
  }
  return s;
}

StepMemory step_memory(const ModelConfig& cfg, const StepShape& sh, const Mesh& mesh,
                       StepTarget target) {
  const bool cpu = target == StepTarget::xla_cpu;
  const int64_t d = mesh.axis_size("data"), f = mesh.axis_size("fsdp"),
                t = mesh.axis_size("tensor");
  const int64_t Bl = sh.micro_batch / (d * f), T = sh.seq_len, N = Bl * T;
  const int64_t C = cfg.hidden_size, L = cfg.num_hidden_layers, D = cfg.head_size();
  const bool gated = cfg.traits().gated_mlp;
  const int64_t F = cfg.intermediate_size / t, G = gated ? 2 * F : F;
  const int64_t H = cfg.num_attention_heads / t, Q = H * D, V = cfg.vocab_size / t;
  const int64_t QKV = Q + 2 * cfg.kv_heads() / t * D;
  // XLA:CPU computes bf16 in f32 (its float normalisation widens bf16 ops); an accelerator keeps
  // activations in the compute dtype. Attention statistics and logits are f32 everywhere.
  const int64_t es = cpu || !sh.bf16 ? 4 : 2;
  const bool widened = cpu && sh.bf16;  // XLA:CPU then keeps scores and rows twice
  // Attention up to kDenseAttentionUpTo positions is dense: each layer keeps its [B, H, T, T]
  // probabilities for the backward. Longer sequences go blocked: only the log-sum-exp stays,
  // and a [B, H, kAttentionBlock, kAttentionBlock] tile is the working set.
  const bool dense = T <= kDenseAttentionUpTo;
  const int64_t tt_keep = dense ? Bl * H * T * T * 4 : Bl * H * T * 4;
  const int64_t tt_work = dense ? tt_keep : Bl * H * kAttentionBlock * kAttentionBlock * 4;
  const ParamShards ps = param_shards(cfg, mesh, sh.optimizer);

  // What one layer keeps for its backward: its input, the norms' outputs and the residual after
  // attention (4 rows of C), q, k, v and the attention output as heads (4 of Q: grouped k and v
  // are broadcast to every query head), the MLP's up projection and activations, the scores.
  const bool separate_qkv = !cfg.traits().conv1d;  // gpt2's c_attn is q|k|v in one tensor
  int64_t layer = es * (4 * N * C + 4 * N * Q + N * G + (gated ? 3 : 2) * N * F) +
                  tt_keep * (widened ? 2 : 1) + (widened ? 4 * N * C : 0);
  // XLA:CPU concatenates a layer's separate q, k, v (and gate, up) weights into the fused matrix
  // the model multiplies by, and keeps that copy (f32) from the forward to the backward.
  if (cpu) layer += 4 * C * ((separate_qkv ? QKV : 0) + (gated ? G : 0));
  // One layer's backward working set: the recomputed (or saved) rows, scores and their gradient.
  int64_t work = es * (3 * N * C + 4 * N * Q + (gated ? 3 : 2) * N * F) +
                 tt_work * (widened ? 2 : 1);
  // XLA:CPU's packing of a checkpointed step leaves about one layer's scores and two rows of Q
  // unused between the recomputed forward and the backward (measured: docs/parallel.md).
  const int64_t packing = cpu && sh.checkpointing ? tt_work + 2 * es * N * Q : 0;
  // loss_chunk_tokens rows of each device's own N rows, as head_loss.cpp chunks on a mesh.
  const int64_t chunk = std::min(sh.loss_chunk, N);
  const int64_t residual = es * N * C;

  StepMemory m;
  auto add = [](std::vector<MemoryTerm>& v, uint64_t& sum, const char* key, const char* what,
                int64_t bytes) {
    if (bytes <= 0) return;
    v.push_back({key, what, u(bytes)});
    sum += u(bytes);
  };
  add(m.arguments, m.argument_bytes, "weights", "weights (f32)", 4 * ps.total);
  add(m.arguments, m.argument_bytes, "optimizer_state", "optimizer state (f32)", 4 * ps.moments);
  add(m.arguments, m.argument_bytes, "batch", "batch (ids, labels, positions)", 3 * N * 4 + 64);

  // Where the loss head runs: what the layers kept, and the head's chunk (logits and their
  // gradient, f32), its weight-gradient accumulator (f32, split as the head) and rows of C.
  if (sh.checkpointing)
    add(m.at_head, m.head_bytes, "residual_streams", "residual stream per layer boundary",
        (L + 1) * residual);
  else
    add(m.at_head, m.head_bytes, "saved_activations", "saved activations, every layer", L * layer);
  add(m.at_head, m.head_bytes, "loss_chunk", "loss chunk (logits and their gradient)",
      2 * chunk * V * 4);
  add(m.at_head, m.head_bytes, "head_gradient", "head weight-gradient accumulator",
      4 * cfg.vocab_size * C / (t * f));
  add(m.at_head, m.head_bytes, "head_rows", "final norm output and its gradient", 4 * residual);

  // The end of the backward: every gradient, and one layer's working set beside what is still
  // kept. In bf16 on an accelerator the gradients are bf16 there: each is widened into f32 only
  // where the update consumes it, one tensor at a time. XLA:CPU holds them widened.
  if (cpu || !sh.bf16)
    add(m.at_backward, m.backward_bytes, "gradients", "gradients (f32)", 4 * ps.total);
  else
    add(m.at_backward, m.backward_bytes, "gradients", "gradients (bf16, before the f32 fold)",
        2 * ps.total);
  if (sh.checkpointing) {
    add(m.at_backward, m.backward_bytes, "residual_streams", "residual stream per layer boundary",
        (L + 1) * residual);
    add(m.at_backward, m.backward_bytes, "layer_working_set", "one layer recomputed and "
        "differentiated", work);
    add(m.at_backward, m.backward_bytes, "packing", "XLA:CPU packing slack", packing);
  } else {
    add(m.at_backward, m.backward_bytes, "saved_activations", "the first layer's saved set",
        layer);
  }
  if (!cpu) {
    // On an accelerator the bf16 copy of the weights is a real array, converted at the start of
    // the pass and live throughout; and each layer's weights are gathered over fsdp, one in use
    // and the next prefetched.
    const int64_t copy = sh.bf16 ? 2 * ps.total : 0;
    const int64_t gathered = f > 1 ? 2 * es * ps.layer_gathered : 0;
    for (auto* phase : {&m.at_head, &m.at_backward}) {
      uint64_t& sum = phase == &m.at_head ? m.head_bytes : m.backward_bytes;
      add(*phase, sum, "bf16_weights", "bf16 compute copy of the weights", copy);
      add(*phase, sum, "gathered_layers", "two layers' weights gathered over fsdp", gathered);
    }
  }
  return m;
}

}  // namespace lmt
