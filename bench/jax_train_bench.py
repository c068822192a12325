"""The JAX peer of `lmtrain bench`: the same training step, written in JAX, on any JAX device (CPU,
GPU, TPU). It reads the same config and --set overrides, trains the config's model on random tokens
and prints one JSON object (tokens_per_s, step_ms, step_ms_median, mfu, compile_s, peak_rss_bytes,
device_peak_bytes, ...), so that lmtrain's step can be compared with what XLA makes of a plain JAX
program on the same device. After compiling and one warm-up step, --steps steps run back to back
(tokens_per_s, step_ms: their mean), then as many again, each waited for (step_ms_median).

The step is lmtrain's: ids random in [0, vocab), labels = ids shifted by one over the flat
micro_batch_size * seq_len * grad_accum_steps array (the last label is ids[0]), cross-entropy mean
over every token, train.grad_accum_steps micro-batches per step, global-norm clipping
(train.grad_clip), then AdamW in torch.optim.AdamW's order (decoupled decay on matrices only unless
optimizer.decay_embeddings / decay_norms_and_biases), f32 master weights and moments. bf16
(train.precision or --precision) computes in bf16 from the f32 weights; norms, softmax and the loss
take their statistics in f32. Families: llama, mistral, qwen2 (RMSNorm, RoPE with default / linear /
llama3 scaling, grouped-query attention, gated MLP, q/k/v biases for qwen2, mistral's sliding
window) and gpt2 (LayerNorm, learned positions, fused c_attn, biases, GELU MLP). The parameter
layout follows lmtrain's: q|k|v fused in one matrix, gate|up in another.

Run in the reference environment (scripts/setup.sh):

  python3 bench/jax_train_bench.py --config configs/bench/gpt2-124m.yaml [--steps 5]
      [--set section.key=value]... [--attention xla|cudnn] [--precision f32|bf16] [--remat]
  python3 bench/jax_train_bench.py --config ... --compile-only   compiled memory, nothing run
  python3 bench/jax_train_bench.py --config ... --target h200   compiled for a GPU that is not
      here, through XLA's CUDA plugin (h100, h200: lmtrain's target configs, or a
      GpuTargetConfigProto text file): memory against the device's and kernel launches per step,
      counted as `lmtrain bench --target` counts them (bench/xla_launches.py)
  python3 bench/jax_train_bench.py --check [--config ...]        logits, loss, gradients and one
      AdamW step against transformers and torch.optim.AdamW (f32, CPU; bench/jax_train_check.py);
      without --config, on small random models of every family this script implements

--attention cudnn is jax.nn.dot_product_attention's cuDNN kernel (GPU and bf16 only); xla is
einsum + softmax, which keeps the T x T scores. --remat saves memory where XLA keeps the
optimization barriers jax.checkpoint puts around each layer (GPU); XLA:CPU (jax 0.10.2) drops them
and compiles the same temporaries with or without it (--compile-only shows it).
"""
import argparse
import json
import math
import re
import resource
import sys
import time

import numpy as np
import yaml

MODEL_KEYS = dict(
    family="llama", vocab_size=32000, hidden_size=768, intermediate_size=2048,
    num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=0, head_dim=0,
    max_position_embeddings=2048, rope_theta=10000.0, rope_type="default", rope_factor=1.0,
    rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_original_max_position_embeddings=0,
    attention_bias=False, sliding_window=0, sliding_window_pattern=0, rms_norm_eps=1e-5,
    tie_word_embeddings=False, initializer_range=0.02, hidden_act="silu", bos_token_id=-1,
    eos_token_id=-1)
# lmtrain's keys of what this peer does not implement: accepted at these values only. (yarn's RoPE
# keys are read only with rope_type yarn, which is refused.)
UNSUPPORTED_KEYS = dict(rope_local_base_freq=0.0, attn_logit_softcapping=0.0,
                        final_logit_softcapping=0.0, query_pre_attn_scalar=0.0)
YARN_KEYS = {"rope_attention_factor", "rope_beta_fast", "rope_beta_slow", "rope_mscale",
             "rope_mscale_all_dim", "rope_truncate"}
FAMILY_DEFAULTS = {  # lmtrain's family_defaults() for the families implemented here
    "llama": {},
    "mistral": dict(sliding_window=4096),
    "qwen2": dict(attention_bias=True, rope_theta=1e6, rms_norm_eps=1e-6),
    "gpt2": dict(hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True, vocab_size=50257,
                 max_position_embeddings=1024),
}
TRAIN_KEYS = dict(micro_batch_size=8, grad_accum_steps=1, lr=3e-4, weight_decay=0.1,
                  grad_clip=1.0, seed=1234, precision="f32", activation_checkpointing=False)
OPTIMIZER_KEYS = dict(name="adamw", beta1=0.9, beta2=0.95, eps=1e-8, decay_embeddings=False,
                      decay_norms_and_biases=False)


# ---- the config ----

def load_config(path, overrides):
    """The config file with --set overrides applied, lmtrain's defaults filled in. Returns
    (model, train, optimizer, seq_len) as dicts (seq_len an int)."""
    raw = yaml.safe_load(open(path)) if path else {}
    raw = {k: dict(v or {}) for k, v in raw.items() if isinstance(v, dict) or v is None}
    for kv in overrides:
        key, sep, value = kv.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot:
            raise SystemExit(f"--set {kv}: expected section.key=value")
        raw.setdefault(section, {})[name] = yaml.safe_load(value)
    return (model_config(raw.get("model", {})),
            section_config("train", raw.get("train", {}), TRAIN_KEYS),
            section_config("optimizer", raw.get("optimizer", {}), OPTIMIZER_KEYS),
            int(raw.get("data", {}).get("seq_len", 256)))


def typed(value, default):
    """PyYAML reads 1e-5 (no dot) as a string; lmtrain's YAML reader takes it as a number."""
    return float(value) if isinstance(default, float) and isinstance(value, str) else value


def section_config(name, given, defaults):
    """A train / optimizer section: the keys this peer uses, defaults filled in (other keys, such
    as train.backend, are lmtrain's own and ignored here)."""
    out = dict(defaults)
    out.update({k: typed(v, defaults[k]) for k, v in given.items() if k in defaults})
    if name == "optimizer" and out["name"] != "adamw":
        raise SystemExit(f"optimizer.name {out['name']}: this peer runs adamw only")
    return out


def model_config(given):
    family = given.get("family", "llama")
    if family not in FAMILY_DEFAULTS:
        raise SystemExit(f"model.family {family}: this peer implements "
                         f"{', '.join(FAMILY_DEFAULTS)} (lmtrain has more)")
    m = dict(MODEL_KEYS, **FAMILY_DEFAULTS[family])
    for k, v in given.items():
        if k in UNSUPPORTED_KEYS and v != UNSUPPORTED_KEYS[k]:
            raise SystemExit(f"model.{k}: {v} is not implemented in this peer")
        if k not in MODEL_KEYS and k not in UNSUPPORTED_KEYS and k not in YARN_KEYS:
            raise SystemExit(f"model.{k}: unknown key")
        if k in MODEL_KEYS:
            m[k] = typed(v, MODEL_KEYS[k])
    if family == "gpt2" and "intermediate_size" not in given:
        m["intermediate_size"] = 4 * m["hidden_size"]
    m["kv_heads"] = m["num_key_value_heads"] or m["num_attention_heads"]
    m["head_size"] = m["head_dim"] or m["hidden_size"] // m["num_attention_heads"]
    m["gpt2"] = family == "gpt2"
    m["qkv_bias"] = bool(m["attention_bias"]) or family == "qwen2"
    if m["gpt2"] and (m["kv_heads"] != m["num_attention_heads"]
                      or m["head_size"] * m["num_attention_heads"] != m["hidden_size"]):
        raise SystemExit("gpt2: num_key_value_heads and head_dim must be 0 (all heads, "
                         "hidden_size / num_attention_heads)")
    if m["num_attention_heads"] % m["kv_heads"]:
        raise SystemExit("model.num_attention_heads must be divisible by num_key_value_heads")
    if m["rope_type"] not in ("default", "linear", "llama3"):
        raise SystemExit(f"model.rope_type {m['rope_type']}: this peer implements default, "
                         "linear and llama3")
    if m["hidden_act"] not in ("silu", "gelu_pytorch_tanh", "relu", "relu2"):
        raise SystemExit(f"model.hidden_act {m['hidden_act']}: not one of silu, "
                         "gelu_pytorch_tanh, relu, relu2")
    return m


def rope_inv_freq(m):
    """inv_freq [head_size / 2] in float32, as lmtrain's rope.cpp (transformers' rope utils)."""
    D = m["head_size"]
    base = np.float32(m["rope_theta"])
    inv = np.float32(1) / (base ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D)))
    if m["rope_type"] == "linear":
        inv = inv / np.float32(m["rope_factor"])
    elif m["rope_type"] == "llama3":
        old_len = float(m["rope_original_max_position_embeddings"] or m["max_position_embeddings"])
        low, high = m["rope_low_freq_factor"], m["rope_high_freq_factor"]
        factor = np.float32(m["rope_factor"])
        wavelen = (np.float32(1) / inv) * np.float32(2 * math.pi)
        scaled = np.where(wavelen > np.float32(old_len / low), inv / factor, inv)
        smooth = ((np.float32(1) / wavelen) * np.float32(old_len) - np.float32(low)) \
            / np.float32(high - low)
        mixed = (np.float32(1) - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < np.float32(old_len / high)) & ~(wavelen > np.float32(old_len / low))
        inv = np.where(medium, mixed, scaled)
    return inv.astype(np.float32)


def is_sliding_layer(m, layer):
    if m["sliding_window"] <= 0:
        return False
    return m["sliding_window_pattern"] <= 0 or (layer + 1) % m["sliding_window_pattern"] != 0


# ---- parameters: names, kinds and initialisation as lmtrain's layout ----

def param_specs(m):
    """[(path, shape, kind)] in lmtrain's order; kind is matrix, embedding, norm or bias.
    Matrices are stored [in, out] (x @ w); a residual projection's path ends in "o" or "down"."""
    V, C, F, L = m["vocab_size"], m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"]
    Q, KV = m["num_attention_heads"] * m["head_size"], m["kv_heads"] * m["head_size"]
    specs = [(("embed",), (V, C), "embedding")]
    if m["gpt2"]:
        specs.append((("pos",), (m["max_position_embeddings"], C), "embedding"))
    for l in range(L):
        p = ("layers", l)
        specs.append((p + ("ln1",), (C,), "norm"))
        if m["gpt2"]:
            specs.append((p + ("ln1_b",), (C,), "bias"))
        specs.append((p + ("qkv",), (C, Q + 2 * KV), "matrix"))
        if m["gpt2"] or m["qkv_bias"]:
            specs.append((p + ("qkv_b",), (Q + 2 * KV,), "bias"))
        specs.append((p + ("o",), (Q, C), "matrix"))
        if m["gpt2"]:
            specs.append((p + ("o_b",), (C,), "bias"))
        specs.append((p + ("ln2",), (C,), "norm"))
        if m["gpt2"]:
            specs += [(p + ("ln2_b",), (C,), "bias"), (p + ("up",), (C, F), "matrix"),
                      (p + ("up_b",), (F,), "bias"), (p + ("down",), (F, C), "matrix"),
                      (p + ("down_b",), (C,), "bias")]
        else:
            specs += [(p + ("up",), (C, 2 * F), "matrix"), (p + ("down",), (F, C), "matrix")]
    specs.append((("norm",), (C,), "norm"))
    if m["gpt2"]:
        specs.append((("norm_b",), (C,), "bias"))
    if not m["tie_word_embeddings"]:
        specs.append((("head",), (V, C), "matrix"))
    return specs


def nest(specs, leaf):
    """The params pytree {name: array, "layers": [{name: array}]} with leaf(path, shape, kind)."""
    out = {"layers": [{} for _ in range(sum(1 for s in specs if s[0][-1] == "ln1"))]}
    for path, shape, kind in specs:
        if path[0] == "layers":
            out["layers"][path[1]][path[2]] = leaf(path, shape, kind)
        else:
            out[path[0]] = leaf(path, shape, kind)
    return out


def init_params(m, seed):
    """Normal(0, initializer_range) matrices and embeddings, residual projections (o, down) with
    std / sqrt(2 L), norms 1, biases 0, as lmtrain's init_weights (not its random numbers)."""
    import jax
    import jax.numpy as jnp
    specs = param_specs(m)
    std = m["initializer_range"]
    resid = std / math.sqrt(2 * m["num_hidden_layers"])
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), len(specs)))

    def leaf(path, shape, kind):
        key = next(keys)
        if kind == "norm":
            return jnp.ones(shape, jnp.float32)
        if kind == "bias":
            return jnp.zeros(shape, jnp.float32)
        s = resid if path[-1] in ("o", "down") else std
        return s * jax.random.normal(key, shape, jnp.float32)
    return nest(specs, leaf)


def decay_mask(m, opt):
    def leaf(path, shape, kind):
        return {"matrix": True, "embedding": opt["decay_embeddings"]}.get(
            kind, opt["decay_norms_and_biases"])
    return nest(param_specs(m), leaf)


def flops_per_token(m, T, n_params):
    """lmtrain's train_flops_per_token: 6 N + 12 L (heads * head_size) T, N = parameters in
    matrix products (all but an untied input embedding and gpt2's position table)."""
    n = n_params
    if not m["tie_word_embeddings"]:
        n -= m["vocab_size"] * m["hidden_size"]
    if m["gpt2"]:
        n -= m["max_position_embeddings"] * m["hidden_size"]
    return 6.0 * n + 12.0 * m["num_hidden_layers"] * m["num_attention_heads"] * m["head_size"] * T


# ---- the model ----

def make_model(m, compute_dtype, attention, remat):
    """Returns (hidden(params, ids) -> [B, T, C] final-norm output, logits_of(params, h))."""
    import jax
    import jax.numpy as jnp
    f32, cd = jnp.float32, compute_dtype
    Hq, Hkv, D = m["num_attention_heads"], m["kv_heads"], m["head_size"]
    Q, KV = Hq * D, Hkv * D
    eps = m["rms_norm_eps"]
    inv_freq = None if m["gpt2"] else rope_inv_freq(m)

    def c(w):
        return w.astype(cd)

    def norm(x, w, b=None):  # statistics in f32, output in the compute dtype
        x = x.astype(f32)
        if b is None:
            y = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w
        else:
            mu = jnp.mean(x, -1, keepdims=True)
            var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
            y = (x - mu) * jax.lax.rsqrt(var + eps) * w + b
        return y.astype(cd)

    def act(x):
        name = m["hidden_act"]
        if name == "silu":
            return jax.nn.silu(x)
        if name == "gelu_pytorch_tanh":
            return jax.nn.gelu(x, approximate=True)
        r = jax.nn.relu(x)
        return r * r if name == "relu2" else r

    def rope(x, cos, sin):  # x [B, T, H, D], rotate-half as transformers' Llama; f32 math
        x1, x2 = x[..., : D // 2].astype(f32), x[..., D // 2:].astype(f32)
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(cd)

    def attend(q, k, v, window):  # q [B, T, Hq, D], k, v [B, T, Hkv, D] -> [B, T, Hq * D]
        B, T = q.shape[:2]
        if attention == "cudnn":
            o = jax.nn.dot_product_attention(
                q, k, v, is_causal=True, implementation="cudnn",
                local_window_size=(window - 1, 0) if window else None)
            return o.reshape(B, T, Q)
        # Query heads grouped by their key/value head (no copies of k and v); the scores in the
        # order a batched matrix product writes them, [B, Hkv, T, group, T].
        g = q.reshape(B, T, Hkv, Hq // Hkv, D)
        s = jnp.einsum("bqhgd,bkhd->bhqgk", g, k).astype(f32) * (1.0 / math.sqrt(D))
        i = jnp.arange(T)
        keep = i[:, None] >= i[None, :]
        if window:  # a windowed query sees `window` keys, itself included
            keep = keep & (i[:, None] - i[None, :] < window)
        p = jax.nn.softmax(jnp.where(keep[:, None, :], s, -1e30), -1).astype(cd)
        return jnp.einsum("bhqgk,bkhd->bqhgd", p, v).reshape(B, T, Q)

    def block(h, w, cos, sin, window):  # h [B, T, C] in the compute dtype
        B, T, C = h.shape
        x = norm(h, w["ln1"], w.get("ln1_b"))
        qkv = x @ c(w["qkv"])
        if "qkv_b" in w:
            qkv = qkv + c(w["qkv_b"])
        q = qkv[..., :Q].reshape(B, T, Hq, D)
        k = qkv[..., Q:Q + KV].reshape(B, T, Hkv, D)
        v = qkv[..., Q + KV:].reshape(B, T, Hkv, D)
        if cos is not None:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = attend(q, k, v, window) @ c(w["o"])
        h = h + (y + c(w["o_b"]) if "o_b" in w else y)
        x = norm(h, w["ln2"], w.get("ln2_b"))
        u = x @ c(w["up"])
        if m["gpt2"]:
            y = act(u + c(w["up_b"])) @ c(w["down"]) + c(w["down_b"])
        else:
            F = u.shape[-1] // 2
            y = (act(u[..., :F]) * u[..., F:]) @ c(w["down"])
        return h + y

    windows = [m["sliding_window"] if is_sliding_layer(m, l) else 0
               for l in range(m["num_hidden_layers"])]
    layer = jax.checkpoint(block, static_argnums=(4,)) if remat else block

    def hidden(params, ids):  # ids [B, T] -> final norm output [B, T, C]
        T = ids.shape[1]
        h = params["embed"][ids]
        cos = sin = None
        if m["gpt2"]:
            h = h + params["pos"][:T][None]
        else:
            ang = jnp.arange(T, dtype=f32)[:, None] * jnp.asarray(inv_freq)[None]
            cos, sin = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
        h = h.astype(cd)
        for w, window in zip(params["layers"], windows):
            h = layer(h, w, cos, sin, window)
        return norm(h, params["norm"], params.get("norm_b"))

    def logits_of(params, h):
        head = params["head"] if "head" in params else params["embed"]
        return h @ c(head).T

    return hidden, logits_of


def make_step(m, train, opt, compute_dtype, attention, remat, n_tokens):
    """The jitted step (params, (m, v, step), ids [A, B, T], labels [A, B, T]) ->
    (params, state, loss); params and state are donated."""
    import jax
    import jax.numpy as jnp
    hidden, logits_of = make_model(m, compute_dtype, attention, remat)
    tm = jax.tree_util.tree_map
    decay = decay_mask(m, opt)
    lr, wd, clip = train["lr"], train["weight_decay"], train["grad_clip"]
    b1, b2, eps = opt["beta1"], opt["beta2"], opt["eps"]

    def loss_fn(params, ids, labels):  # this micro-batch's share of the mean loss
        z = logits_of(params, hidden(params, ids)).astype(jnp.float32)
        lse = jax.nn.logsumexp(z, -1)
        picked = jnp.take_along_axis(z, labels[..., None], -1)[..., 0]
        return jnp.sum(lse - picked) * (1.0 / n_tokens)

    grad_fn = jax.value_and_grad(loss_fn)

    def grads_of(params, ids, labels):
        if ids.shape[0] == 1:
            loss, g = grad_fn(params, ids[0], labels[0])
            return g, loss

        def micro(carry, batch):
            loss, g = grad_fn(params, *batch)
            return (tm(jnp.add, carry[0], g), carry[1] + loss), None
        zero = (tm(jnp.zeros_like, params), jnp.zeros((), jnp.float32))
        return jax.lax.scan(micro, zero, (ids, labels))[0]

    def step(params, state, ids, labels):
        g, loss = grads_of(params, ids, labels)
        mom, vel, t = state
        norm = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
        finite = jnp.isfinite(norm)  # lmtrain skips the whole update on a non-finite norm
        scale = jnp.minimum(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
        g = tm(lambda x: jnp.where(finite, x * scale, 0.0), g)
        t = t + finite.astype(jnp.int32)
        tf = jnp.maximum(t, 1).astype(jnp.float32)
        step_size = jnp.where(finite, lr / (1.0 - b1 ** tf), 0.0)
        inv_bc2_sqrt = jax.lax.rsqrt(1.0 - b2 ** tf)
        keep = lambda x: jnp.where(finite, x, 1.0)  # a factor that is 1 when skipping
        b1_, b2_, shrink = keep(b1), keep(b2), keep(1.0 - lr * wd)
        gone = lambda x: jnp.where(finite, x, 0.0)
        c1, c2 = gone(1.0 - b1), gone(1.0 - b2)
        # torch.optim.AdamW's update (decay, moments, step), the moments first and the weights
        # from the new moments: XLA then updates the donated buffers in place (a weight update
        # that recomputed the moments from their old values would need a copy of both).
        mom = tm(lambda mi, gi: b1_ * mi + c1 * gi, mom, g)
        vel = tm(lambda vi, gi: b2_ * vi + c2 * gi * gi, vel, g)
        params = tm(lambda p, mi, vi, dec: (p * shrink if dec else p)
                    - step_size * mi / (jnp.sqrt(vi) * inv_bc2_sqrt + eps),
                    params, mom, vel, decay)
        return params, (mom, vel, t), loss

    return jax.jit(step, donate_argnums=(0, 1)), hidden, logits_of, loss_fn


# ---- the benchmark ----

def batch(m, train, T):
    """ids and labels [A, B, T]: random ids, labels the flat array shifted by one, as lmtrain."""
    A, B = train["grad_accum_steps"], train["micro_batch_size"]
    ids = np.random.default_rng(train["seed"]).integers(0, m["vocab_size"], A * B * T,
                                                        dtype=np.int32)
    return ids.reshape(A, B, T), np.roll(ids, -1).reshape(A, B, T)


def zero_state(params):
    import jax
    import jax.numpy as jnp
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.int32)


# lmtrain's table of nominal dense peaks (docs/mfu.md, src/train/flops.cpp): device kind contains,
# bf16 TFLOP/s, f32 products TFLOP/s; the first match takes it.
NOMINAL_PEAKS = [("H100 PCIe", 756.0, 378.0), ("H100", 989.4, 494.7), ("H200", 989.4, 494.7),
                 ("A100", 312.0, 156.0), ("TPU v4", 275.0, 275.0), ("TPU v5 lite", 197.0, 197.0),
                 ("TPU v5e", 197.0, 197.0), ("TPU v5p", 459.0, 459.0), ("TPU v5", 459.0, 459.0),
                 ("TPU v6 lite", 918.0, 918.0), ("TPU v6e", 918.0, 918.0)]


def mfu_peak(dtype, precision):
    """(FLOP/s, source) as lmtrain bench divides by: the nominal figure of a device in the table,
    else the best of 9 GEMMs, 2048^3 (4096^3 on an accelerator the table does not know)."""
    import jax
    kind = jax.devices()[0].device_kind
    for name, bf16, f32 in NOMINAL_PEAKS:
        if name in kind:
            tflops = bf16 if precision == "bf16" else f32
            return tflops * 1e12, f"the nominal dense {precision} peak of {kind}, {tflops} TFLOP/s"
    n = 2048 if jax.default_backend() == "cpu" else 4096
    return gemm_peak(dtype, n), f"measured: best {precision} GEMM {n}x{n}x{n} on this device"


def gemm_peak(dtype, n=2048, reps=9):
    """lmtrain's peak: the best of `reps` n x n x n GEMMs in the compute dtype after a warm-up."""
    import jax
    import jax.numpy as jnp
    a = jnp.asarray(np.random.default_rng(1).standard_normal((n, n), np.float32)).astype(dtype)
    f = jax.jit(lambda x, y: x @ y.T)
    best = math.inf
    for rep in range(reps + 1):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        if rep:
            best = min(best, time.perf_counter() - t)
    return 2.0 * n ** 3 / best


def describe(m, train, T, precision, attention, remat, n_params):
    import jax
    dev = jax.devices()[0]
    return {
        "runner": "jax", "jax": jax.__version__, "backend": jax.default_backend(),
        "device": dev.device_kind, "attention": attention, "precision": precision,
        "family": m["family"],
        "shape": {"vocab_size": m["vocab_size"], "hidden_size": m["hidden_size"],
                  "intermediate_size": m["intermediate_size"],
                  "num_hidden_layers": m["num_hidden_layers"],
                  "num_attention_heads": m["num_attention_heads"],
                  "num_key_value_heads": m["kv_heads"], "head_dim": m["head_size"],
                  "seq_len": T, "micro_batch_size": train["micro_batch_size"],
                  "grad_accum_steps": train["grad_accum_steps"], "activation_checkpointing": remat},
        "params": n_params, "optimizer": "adamw"}


TARGETS = {"h100": "h100_sxm", "h200": "h200"}  # lmtrain's src/backend/targets/<name>.txtpb
ALLOCATOR_FRACTION = 0.75  # what the CUDA plugin's allocator takes by default, as lmtrain reports


def target_config(name):
    """The text of --target: lmtrain's config for h100 / h200, or the file given."""
    import os
    if name.lower() in TARGETS:
        here = os.path.dirname(os.path.abspath(__file__))
        name = os.path.join(here, "..", "src", "backend", "targets", TARGETS[name.lower()] + ".txtpb")
    try:
        text = open(name).read()
    except OSError as e:
        raise SystemExit(f"--target {name}: {e.strerror} (h100, h200, or a GpuTargetConfigProto "
                         f"text file)")
    if not re.search(r"(^|\n)\s*gpu_device_info\s*\{", text):
        raise SystemExit(f"--target {name}: not a GPU target config (no gpu_device_info)")
    return text


def compile_for_target(a, step, params, state, ids, labels, out):
    """The step compiled for --target's GPU through XLA's CUDA plugin, no GPU needed: memory,
    whether it fits the device, kernel launches per step (XLA's dump, bench/xla_launches.py)."""
    import os
    import tempfile
    import jax
    from jax.experimental import topologies
    from xla_launches import count_dir
    text = target_config(a.target)
    topo = topologies.get_topology_desc(platform="cuda", topology_name="", target_config=text,
                                        topology="1x1x1")
    dev = topo.devices[0]
    sharding = jax.sharding.SingleDeviceSharding(dev)
    placed = lambda tree: jax.tree.map(  # noqa: E731
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)
    keep = os.environ.get("LMTRAIN_XLA_DUMP")  # as lmtrain: keep XLA's dump there
    if keep:
        os.makedirs(keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jax-xla-", dir=keep or None) as tmp:
        d = tempfile.mkdtemp(prefix="jax-xla-", dir=keep) if keep else tmp
        t = time.perf_counter()
        lowered = step.lower(placed(params), placed(state), placed(ids), placed(labels))
        ma = lowered.compile(compiler_options={"xla_dump_to": d}).memory_analysis()
        out["compile_s"] = time.perf_counter() - t
        out["launches"] = count_dir(d)
    for key in ("argument", "output", "alias", "temp", "generated_code"):
        out[f"{key}_bytes"] = getattr(ma, f"{key}_size_in_bytes", None)
    device = int(m.group(1)) if (m := re.search(r"device_memory_size:\s*([0-9]+)", text)) else 0
    need = out["argument_bytes"] + out["temp_bytes"] + out["output_bytes"] - out["alias_bytes"]
    out["device_kind"] = dev.device_kind
    out["device_fit"] = {"device_bytes": device, "allocator_fraction": ALLOCATOR_FRACTION,
                         "allocator_bytes": int(device * ALLOCATOR_FRACTION), "step_bytes": need,
                         "fits": need <= device * ALLOCATOR_FRACTION}


def run_bench(a):
    m, train, opt, T = load_config(a.config, a.set)
    precision = a.precision or train["precision"]
    remat = a.remat or bool(train["activation_checkpointing"])
    if precision not in ("f32", "bf16"):
        raise SystemExit(f"precision {precision}: f32 or bf16")
    if m["gpt2"] and T > m["max_position_embeddings"]:
        raise SystemExit(f"data.seq_len {T} is longer than max_position_embeddings "
                         f"({m['max_position_embeddings']}) of this gpt2 model")
    if a.target:
        import os
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")  # no CUPTI, no driver here
        a.compile_only = True
    import jax
    import jax.numpy as jnp
    if a.attention == "cudnn":
        if not a.target and jax.default_backend() != "gpu":
            raise SystemExit(f"--attention cudnn: cuDNN's flash attention runs on NVIDIA GPUs "
                             f"only (this JAX's backend is {jax.default_backend()})")
        if precision != "bf16":
            raise SystemExit("--attention cudnn: cuDNN's flash attention takes bf16 (use "
                             "--precision bf16)")
    cd = jnp.bfloat16 if precision == "bf16" else jnp.float32
    ids, labels = batch(m, train, T)
    n_tokens = ids.size
    step = make_step(m, train, opt, cd, a.attention, remat, n_tokens)[0]
    n_params = sum(math.prod(s[1]) for s in param_specs(m))
    out = describe(m, train, T, precision, a.attention, remat, n_params)

    if a.compile_only:  # shapes only: nothing of the model is allocated
        params = jax.eval_shape(lambda: init_params(m, train["seed"]))
        state = jax.eval_shape(zero_state, params)
        if a.target:
            compile_for_target(a, step, params, state, jax.eval_shape(lambda: ids),
                               jax.eval_shape(lambda: labels), out)
            print(json.dumps(out), flush=True)
            return 0
        t = time.perf_counter()
        ma = step.lower(params, state, ids, labels).compile().memory_analysis()
        out["compile_s"] = time.perf_counter() - t
        for key in ("argument", "output", "alias", "temp", "generated_code"):
            out[f"{key}_bytes"] = getattr(ma, f"{key}_size_in_bytes", None)
        print(json.dumps(out), flush=True)
        return 0

    params = jax.jit(lambda: init_params(m, train["seed"]))()
    state = jax.jit(zero_state)(params)
    ids, labels = jax.device_put(ids), jax.device_put(labels)
    t = time.perf_counter()
    compiled = step.lower(params, state, ids, labels).compile()
    out["compile_s"] = time.perf_counter() - t
    try:
        # One program computes every output, so they are ready together: waiting for the loss
        # waits for the step (and costs one wait, not one per parameter).
        t = time.perf_counter()
        params, state, first_loss = compiled(params, state, ids, labels)
        first_loss.block_until_ready()
        out["first_step_ms"] = (time.perf_counter() - t) * 1e3
        # The mean: `steps` steps queued back to back, one wait at the end, as a JAX training
        # loop runs (dispatch overlaps the step before, the device never idles). The median: the
        # same number of steps again, each waited for, as lmtrain's step does (it reads the
        # gradient norm); that costs 10% on a 3 ms CPU step and nothing measurable on long ones.
        t = time.perf_counter()
        for _ in range(a.steps):
            params, state, loss = compiled(params, state, ids, labels)
        loss.block_until_ready()
        mean = (time.perf_counter() - t) / a.steps
        last_loss = float(loss)
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            params, state, loss = compiled(params, state, ids, labels)
            loss.block_until_ready()
            times.append(time.perf_counter() - t)
    except Exception as e:  # out of device memory, above all: one line, not a trace
        out["error"] = str(e).strip().splitlines()[0][:300]
        print(json.dumps(out), flush=True)
        return 1
    fpt = flops_per_token(m, T, n_params)
    tps = n_tokens / mean
    peak, peak_source = mfu_peak(cd, precision)
    stats = None
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:
        pass
    out.update({
        "steps": a.steps, "tokens_per_s": tps, "step_ms": mean * 1e3,
        "step_ms_median": sorted(times)[len(times) // 2] * 1e3,
        "step_ms_waited_mean": sum(times) / len(times) * 1e3,
        "flops_per_token": fpt, "achieved_flops": fpt * tps, "peak_flops": peak,
        "peak_flops_source": peak_source,
        "mfu": fpt * tps / peak,
        "loss_first_step": float(first_loss), "loss_last_timed_step": last_loss,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device_peak_bytes": (stats or {}).get("peak_bytes_in_use"),
    })
    print(json.dumps(out), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="an lmtrain config (model, train, optimizer, data.seq_len)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config key, as lmtrain bench --set (repeatable)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up step")
    ap.add_argument("--attention", choices=("xla", "cudnn"), default="xla")
    ap.add_argument("--precision", choices=("f32", "bf16"),
                    help="compute precision (default: the config's train.precision)")
    ap.add_argument("--remat", action="store_true",
                    help="recompute each layer in the backward (jax.checkpoint), as "
                         "train.activation_checkpointing")
    ap.add_argument("--compile-only", action="store_true",
                    help="print the compiled step's memory (arguments, outputs, aliases, "
                         "temporaries) without running it")
    ap.add_argument("--target",
                    help="compile for a GPU that is not here, through XLA's CUDA plugin: h100, "
                         "h200 or a GpuTargetConfigProto text file (implies --compile-only); "
                         "memory against the device's and kernel launches per step")
    ap.add_argument("--check", action="store_true",
                    help="compare logits, loss, gradients and one step with transformers and "
                         "torch (f32, CPU) and exit")
    a = ap.parse_args()
    if a.check:
        from jax_train_check import run_check
        return run_check(a)
    if not a.config:
        ap.error("--config is required")
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    return run_bench(a)


if __name__ == "__main__":
    import os
    # lmtrain and torch may use the whole device; XLA's client takes 75% of it unless told.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    sys.exit(main())
