"""The check behind `bench/jax_train_bench.py --check`: the JAX peer's model and step against the
references lmtrain itself is checked against. On small random models of each family the peer
implements (or on a given config, at most 2 sequences of 64 tokens), in f32 on the CPU:
- at initialisation the loss is within 5% of ln(vocab) and every gradient is finite and non-zero;
- with norms and biases moved away from 1 and 0, the logits equal transformers' (LlamaForCausalLM,
  MistralForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel with the same weights) within 1e-4, the
  loss (mean over every micro-batch's tokens, lmtrain's shifted labels) within 1e-5, and every
  gradient within 1e-4 of its tensor's largest;
- one step of the jitted training step (clipping, AdamW) gives torch.optim.AdamW's weights, from
  the same gradients, within 1e-6.

  python3 bench/jax_train_bench.py --check [--config FILE [--set section.key=value]...]
"""
import math

import numpy as np

from jax_train_bench import (MODEL_KEYS, OPTIMIZER_KEYS, TRAIN_KEYS, batch, init_params,
                             load_config, make_step, model_config, nest, param_specs, zero_state)

CHECK_MODELS = [  # small random models, one per family and variant, with a train shape
    (dict(family="llama", vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
          rope_theta=500000.0, rope_type="llama3", rope_factor=8.0, rope_low_freq_factor=1.0,
          rope_high_freq_factor=4.0, rope_original_max_position_embeddings=32),
     dict(micro_batch_size=2, grad_accum_steps=2), 24),
    (dict(family="qwen2", vocab_size=89, hidden_size=32, intermediate_size=64,
          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
          max_position_embeddings=64, tie_word_embeddings=True),
     dict(micro_batch_size=2), 16),
    (dict(family="mistral", vocab_size=64, hidden_size=32, intermediate_size=48,
          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=5,
          max_position_embeddings=64, rope_type="linear", rope_factor=2.0),
     dict(micro_batch_size=2), 16),
    (dict(family="gpt2", vocab_size=101, hidden_size=48, num_hidden_layers=2,
          num_attention_heads=4, max_position_embeddings=32),
     dict(micro_batch_size=2, grad_accum_steps=2), 20),
]


def hf_names(m, params):
    """{transformers parameter name: (array, kind)} of the JAX params (or gradients): fused
    matrices split, [in, out] transposed to torch's Linear layout (gpt2's Conv1D keeps it)."""
    Q, KV = m["num_attention_heads"] * m["head_size"], m["kv_heads"] * m["head_size"]
    F = m["intermediate_size"]
    kinds = {path: kind for path, _, kind in param_specs(m)}
    out = {}

    def put(name, value, path):
        out[name] = (np.asarray(value), kinds[path])
    if m["gpt2"]:
        put("transformer.wte.weight", params["embed"], ("embed",))
        put("transformer.wpe.weight", params["pos"], ("pos",))
        hf = {"ln1": "ln_1.weight", "ln1_b": "ln_1.bias", "qkv": "attn.c_attn.weight",
              "qkv_b": "attn.c_attn.bias", "o": "attn.c_proj.weight", "o_b": "attn.c_proj.bias",
              "ln2": "ln_2.weight", "ln2_b": "ln_2.bias", "up": "mlp.c_fc.weight",
              "up_b": "mlp.c_fc.bias", "down": "mlp.c_proj.weight", "down_b": "mlp.c_proj.bias"}
        for l, w in enumerate(params["layers"]):
            for k, v in w.items():
                put(f"transformer.h.{l}.{hf[k]}", v, ("layers", l, k))
        put("transformer.ln_f.weight", params["norm"], ("norm",))
        put("transformer.ln_f.bias", params["norm_b"], ("norm_b",))
    else:
        put("model.embed_tokens.weight", params["embed"], ("embed",))
        for l, w in enumerate(params["layers"]):
            p, at = f"model.layers.{l}.", lambda k: ("layers", l, k)
            qkv = np.asarray(w["qkv"])
            for name, part in (("q", qkv[:, :Q]), ("k", qkv[:, Q:Q + KV]), ("v", qkv[:, Q + KV:])):
                put(f"{p}self_attn.{name}_proj.weight", part.T, at("qkv"))
            if "qkv_b" in w:
                b = np.asarray(w["qkv_b"])
                for name, part in (("q", b[:Q]), ("k", b[Q:Q + KV]), ("v", b[Q + KV:])):
                    put(f"{p}self_attn.{name}_proj.bias", part, at("qkv_b"))
            put(f"{p}self_attn.o_proj.weight", np.asarray(w["o"]).T, at("o"))
            put(f"{p}input_layernorm.weight", w["ln1"], at("ln1"))
            put(f"{p}post_attention_layernorm.weight", w["ln2"], at("ln2"))
            up = np.asarray(w["up"])
            put(f"{p}mlp.gate_proj.weight", up[:, :F].T, at("up"))
            put(f"{p}mlp.up_proj.weight", up[:, F:].T, at("up"))
            put(f"{p}mlp.down_proj.weight", np.asarray(w["down"]).T, at("down"))
        put("model.norm.weight", params["norm"], ("norm",))
    if "head" in params:
        put("lm_head.weight", params["head"], ("head",))
    return out


def check_model(model, train, opt, T, lines):
    """Returns True when this model matches transformers and torch.optim.AdamW; appends the
    measured differences to lines."""
    import jax
    import jax.numpy as jnp
    import torch
    from torch_train_bench import hf_config  # bench/ is on the path: the script's folder
    from transformers import AutoModelForCausalLM
    m = model
    ids, labels = batch(m, train, T)
    step, hidden, logits_of, loss_fn = make_step(m, train, opt, jnp.float32, "xla", False,
                                                 ids.size)
    grads_of = jax.jit(jax.value_and_grad(
        lambda p: sum(loss_fn(p, i, l) for i, l in zip(ids, labels))))
    ok = True

    def verdict(name, value, limit):
        nonlocal ok
        ok &= bool(value <= limit)
        lines.append(f"  {name:<44} {value:10.3g}  (limit {limit:.3g})"
                     f"{'' if value <= limit else '  FAIL'}")

    # At initialisation: the loss within 5% of ln(vocab) (a uniform guess; the small random logits
    # add about their variance / 2), every gradient finite and non-zero.
    params = init_params(m, train["seed"])
    loss, g = grads_of(params)
    verdict("|loss at init - ln(vocab)|", abs(float(loss) - math.log(m["vocab_size"])),
            0.05 * math.log(m["vocab_size"]))
    norms = [float(jnp.linalg.norm(x)) for x in jax.tree_util.tree_leaves(g)]
    lines.append(f"  gradient norms at init: min {min(norms):.3g} max {max(norms):.3g}")
    ok &= all(math.isfinite(n) and n > 0 for n in norms)

    # Norms and biases away from 1 and 0, so that they are checked too.
    keys = iter(jax.random.split(jax.random.PRNGKey(7), 1000))

    def perturb(path, shape, kind):
        x = params["layers"][path[1]][path[2]] if path[0] == "layers" else params[path[0]]
        return x + 0.1 * jax.random.normal(next(keys), shape) if kind in ("norm", "bias") else x
    params = nest(param_specs(m), perturb)
    hc = hf_config({k: v for k, v in m.items() if k in MODEL_KEYS})
    hc._attn_implementation = "eager"
    ref = AutoModelForCausalLM.from_config(hc, dtype=torch.float32)
    named = hf_names(m, params)
    theirs = dict(ref.named_parameters())
    if set(named) != set(theirs):
        lines.append(f"  parameter names differ: {sorted(set(named) ^ set(theirs))}")
        return False
    with torch.no_grad():
        for name, p in theirs.items():
            p.copy_(torch.from_numpy(named[name][0].copy()))

    z = np.asarray(logits_of(params, hidden(params, jnp.asarray(ids[0]))))
    ref_loss = 0.0
    for a, (i, l) in enumerate(zip(ids, labels)):  # the mean over every micro-batch's tokens
        out = ref(input_ids=torch.from_numpy(i).long())
        if a == 0:
            verdict("max |logits - transformers'|", float(np.max(np.abs(
                z - out.logits.detach().numpy()))), 1e-4)
        part = torch.nn.functional.cross_entropy(
            out.logits.reshape(-1, m["vocab_size"]), torch.from_numpy(l).long().reshape(-1),
            reduction="sum") / ids.size
        part.backward()
        ref_loss += float(part.detach())
    loss, g = grads_of(params)
    verdict("|loss - transformers'|", abs(float(loss) - ref_loss), 1e-5)
    named_grads = hf_names(m, g)
    worst = max(float(np.max(np.abs(gv - theirs[n].grad.numpy())) / np.max(np.abs(gv)))
                for n, (gv, _) in named_grads.items())
    verdict("max |grad - transformers'| / max |grad|", worst, 1e-4)

    # One step: clipping and AdamW against torch's, from the same gradients.
    decay = {n for n, (_, kind) in named.items()
             if kind == "matrix" or (kind == "embedding" and opt["decay_embeddings"])
             or (kind in ("norm", "bias") and opt["decay_norms_and_biases"])}
    with torch.no_grad():
        for name, p in theirs.items():
            p.grad = torch.from_numpy(named_grads[name][0].copy())
    groups = [{"params": [p for n, p in theirs.items() if n in decay],
               "weight_decay": train["weight_decay"]},
              {"params": [p for n, p in theirs.items() if n not in decay], "weight_decay": 0.0}]
    torch_opt = torch.optim.AdamW(groups, lr=train["lr"], betas=(opt["beta1"], opt["beta2"]),
                                  eps=opt["eps"])
    torch.nn.utils.clip_grad_norm_(list(theirs.values()), train["grad_clip"])
    torch_opt.step()
    new, _, _ = step(params, zero_state(params), ids, labels)
    worst = max(float(np.max(np.abs(v - theirs[n].detach().numpy())))
                for n, (v, _) in hf_names(m, new).items())
    verdict("max |weights after one step - torch's|", worst, 1e-6 * max(1.0, train["lr"] / 1e-3))
    return ok


def run_check(a):
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
    if a.config:
        m, train, opt, T = load_config(a.config, a.set)
        train["micro_batch_size"] = min(train["micro_batch_size"], 2)
        cases = [(m, train, opt, min(T, 64))]
    else:
        cases = [(model_config(m), dict(TRAIN_KEYS, lr=1e-3, **t), dict(OPTIMIZER_KEYS), T)
                 for m, t, T in CHECK_MODELS]
    ok = True
    for m, train, opt, T in cases:
        lines = []
        good = check_model(m, train, opt, T, lines)
        ok &= good
        print(f"{m['family']} vocab {m['vocab_size']} hidden {m['hidden_size']} "
              f"heads {m['num_attention_heads']}/{m['kv_heads']} rope {m['rope_type']} "
              f"window {m['sliding_window']} tied {m['tie_word_embeddings']} "
              f"B{train['micro_batch_size']} T{T} accum {train['grad_accum_steps']}: "
              f"{'ok' if good else 'FAILED'}")
        print("\n".join(lines), flush=True)
    print("check: all ok" if ok else "check: FAILED")
    return 0 if ok else 1
