#!/usr/bin/env python3
"""Makes Hugging Face references for lmtrain's parity tests: the committed fixtures under
tests/data/hf (tests/hf/test_hf_parity.cpp) and the ones the reference tier computes at test time
(tests/reference/test_models_reference.cpp), one directory per family or variant:

  <out>/<name>/config.json, model*.safetensors   tiny model, save_pretrained after random init with
                                                  noise on every tensor (float32 values)
  <out>/<name>/ref_{a,b,...}.json                 input_ids (one sequence), loss (mean next-token
                                                  cross-entropy, labels = input_ids); with
                                                  --packed also ref_p.json, whose positions restart
                                                  at every document
  <out>/<name>/ref_*_logits.safetensors           logits [T, vocab]
  <out>/<name>/ref_*_scores.safetensors          with --token-scores: per position t < T-1 the
                                                  log_softmax of logits[t] at input_ids[t+1]
                                                  (logprob), whether that id is the argmax
                                                  (greedy, i32) and the top two logits' gap, as
                                                  lm-evaluation-harness's HF backend scores
  <out>/<name>/ref_*_grads.safetensors            d loss / d parameter, by lmtrain's (Hugging Face
                                                  text-model) name

Modes:
  default          the committed fixtures: fixed small configs (FAMILIES), float32 math, F32 refs.
  --random-config  a config drawn from --seed for the family (sizes, heads and kv heads, head_dim,
                   vocab, tied or not, windows, RoPE parameters), odd sequence lengths.
  --float64        transformers computes logits, loss and gradients in float64 on the float32
                   weights, refs written as F64. transformers rounds a few steps to float32 even
                   in a float64 model (RMSNorm and the loss upcast with .float(), eager softmax
                   takes dtype=float32, RoPE's cos and sin); here those stay in float64, and RoPE
                   keeps transformers' float32 angle (float32 position times float32 inv_freq,
                   as lmtrain) with cos and sin taken in float64 (as lmtrain takes them).
  --save bf16      the weights are rounded to bfloat16 and saved so; refs use those values.
  --max-shard-size save_pretrained's shard size (e.g. 20KB): several files and an index.
  --multimodal     (gemma3 only) a tiny Gemma3ForConditionalGeneration (SigLIP tower, projector)
                   around the text model; refs are its text-only logits, loss and the text model's
                   gradients.
  --packed         also ref_p: one row of 2-3 documents, position_ids restarting at each (which
                   transformers turns into a block-diagonal mask); with dynamic RoPE its longest
                   document is longer than max_position_embeddings.

Ids never take pad_token_id (transformers' embedding, built with padding_idx, gives that row no
gradient; lmtrain does). Every reference starts from a fresh RoPE state (dynamic RoPE caches the
longest length it has seen). A random config's seed is --seed plus a hash of its name, so a family
made alone draws what it draws among all.

CPU math, eager attention. Needs torch, transformers and safetensors (scripts/setup.sh's
environment). Run: python3 scripts/make_hf_fixtures.py --out tests/data/hf [--family gemma3 ...]
"""
import argparse
import contextlib
import copy
import json
import os
import random
import zlib

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
from safetensors.torch import save_file
import transformers as tf  # noqa: E402

tf.logging.set_verbosity_error()
_TO = torch.Tensor.to  # float64_math() replaces torch.Tensor.to; rope_float64 needs the real one

COMMON = dict(vocab_size=256, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

FAMILIES = {
    "llama": lambda: tf.LlamaConfig(**COMMON, tie_word_embeddings=False),
    "llama_tied_llama3rope": lambda: tf.LlamaConfig(
        **COMMON, tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=16)),
    # YaRN: head 8, theta 1e4, original 64 -> correction range dims 0..2 of 4 (so both the kept
    # and the interpolated frequencies occur), attention factor 0.1 ln 4 + 1.
    "llama_yarn": lambda: tf.LlamaConfig(
        **COMMON, rope_scaling=dict(rope_type="yarn", factor=4.0,
                                    original_max_position_embeddings=64)),
    # Dynamic NTK: max_position_embeddings 16 is below both sequences (17 and 29 tokens), so each
    # forward grows the base for its own length (each reference starts from a fresh RoPE state).
    "llama_dynamic": lambda: tf.LlamaConfig(
        **dict(COMMON, max_position_embeddings=16),
        rope_scaling=dict(rope_type="dynamic", factor=2.0)),
    "mistral_swa": lambda: tf.MistralConfig(**COMMON, sliding_window=8),
    "qwen2": lambda: tf.Qwen2Config(**COMMON),
    "qwen3": lambda: tf.Qwen3Config(**COMMON, head_dim=16),
    "gemma": lambda: tf.GemmaConfig(**COMMON, head_dim=16),
    "gemma2": lambda: tf.Gemma2Config(**COMMON, head_dim=16, sliding_window=8,
                                      query_pre_attn_scalar=16),
    # Window on 5 of every 6 layers; those use plain RoPE with base 1e4, the others 1e6.
    "gemma3": lambda: tf.Gemma3TextConfig(
        **dict(COMMON, num_hidden_layers=6), head_dim=16, sliding_window=8,
        query_pre_attn_scalar=16,
        rope_parameters={"full_attention": dict(rope_type="default", rope_theta=1e6),
                         "sliding_attention": dict(rope_type="default", rope_theta=1e4)}),
    # gemma3 with YaRN on the full-attention layers, in transformers 5's per-layer-type form; the
    # sliding layers keep plain RoPE with base 1e4.
    "gemma3_yarn": lambda: tf.Gemma3TextConfig(
        **dict(COMMON, num_hidden_layers=6), head_dim=16, sliding_window=8,
        query_pre_attn_scalar=16,
        rope_parameters={
            "full_attention": dict(rope_type="yarn", rope_theta=1e6, factor=4.0,
                                   original_max_position_embeddings=64),
            "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}),
    "gpt2": lambda: tf.GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=256),
}

# The variants --random-config draws: family (transformers' config class) and RoPE scaling.
RANDOM = {
    "llama": ("llama", "default"), "llama_linear": ("llama", "linear"),
    "llama_llama3": ("llama", "llama3"), "llama_yarn": ("llama", "yarn"),
    "llama_dynamic": ("llama", "dynamic"), "mistral": ("mistral", "default"),
    "qwen2": ("qwen2", "default"), "qwen3": ("qwen3", "default"), "gemma": ("gemma", "default"),
    "gemma2": ("gemma2", "default"), "gemma3": ("gemma3", "default"),
    "gemma3_yarn": ("gemma3", "yarn"), "gpt2": ("gpt2", "default"),
    "llama_relu": ("llama", "default"), "gpt2_relu2": ("gpt2", "default"),
}
# The longest packed row (--packed); its documents' positions restart, but one document may be as
# long as the row.
PACKED_MAX = 48
# The MLP activation of the variants that do not keep their family's (transformers' ACT2FN names).
ACTIVATION = {"llama_relu": "relu", "gpt2_relu2": "relu2"}


def random_rope(r, kind, seq_max):
    """rope_parameters of one kind drawn from r; seq_max: the longest sequence to be run."""
    p = dict(rope_type=kind, rope_theta=r.choice([1e4, 5e4, 5e5, 1e6]))
    if kind == "linear":
        p["factor"] = r.uniform(1.5, 8.0)
    elif kind == "llama3":
        low = r.choice([1.0, 2.0])
        p.update(factor=r.uniform(2.0, 16.0), low_freq_factor=low,
                 high_freq_factor=low * r.choice([2.0, 4.0]),
                 original_max_position_embeddings=r.choice([8, 16, 32, 64]))
    elif kind == "yarn":
        p.update(factor=r.uniform(1.5, 8.0), original_max_position_embeddings=r.choice([8, 16, 32]),
                 beta_fast=r.choice([16.0, 32.0]), beta_slow=r.choice([1.0, 2.0]))
    elif kind == "dynamic":
        p["factor"] = r.uniform(1.2, 4.0)
    return p


def random_config(variant, r, lengths, tied):
    """A small config of `variant` drawn from r; lengths: the sequences it will run."""
    family, rope = RANDOM[variant]
    heads = r.choice([2, 3, 4])
    kv = r.choice([d for d in range(1, heads + 1) if heads % d == 0])
    head_dim = r.choice([8, 12, 16])
    hidden = heads * r.choice([6, 8, 10, 12])  # transformers wants whole heads
    vocab = r.randint(50, 300)
    seq_max = max(lengths)
    # Dynamic NTK must grow: max_position_embeddings below every sequence.
    max_pos = r.randint(6, min(lengths) - 1) if rope == "dynamic" else 2 * seq_max
    window = r.randint(3, max(4, min(lengths) - 2))
    base = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=r.randint(20, 80),
                num_hidden_layers=r.choice([1, 2, 3]), num_attention_heads=heads,
                num_key_value_heads=kv, max_position_embeddings=max_pos, tie_word_embeddings=tied,
                rms_norm_eps=r.choice([1e-6, 1e-5]))
    act = ACTIVATION.get(variant)
    if family == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=heads * head_dim, n_layer=base[
            "num_hidden_layers"], n_head=heads, n_positions=max(max_pos, PACKED_MAX),
            n_inner=r.randint(20, 80),
            tie_word_embeddings=tied, layer_norm_epsilon=r.choice([1e-5, 1e-6]),
            activation_function=act or "gelu_new")
    if act:
        base["hidden_act"] = act
    if family in ("gemma2", "gemma3"):
        base.update(head_dim=head_dim, sliding_window=window,
                    query_pre_attn_scalar=r.choice([head_dim, 16, 24]),
                    attn_logit_softcapping=r.uniform(5.0, 50.0) if family == "gemma2" else None,
                    final_logit_softcapping=r.uniform(3.0, 30.0))
        if family == "gemma2":
            base["rope_parameters"] = random_rope(r, rope, seq_max)
            return tf.Gemma2Config(**base)
        pattern = r.choice([2, 3, 6])
        base["num_hidden_layers"] = r.randint(pattern, pattern + 2)
        base["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                               for i in range(base["num_hidden_layers"])]
        full = random_rope(r, rope, seq_max)
        base["rope_parameters"] = {
            "full_attention": full,
            "sliding_attention": dict(rope_type="default", rope_theta=r.choice([1e4, 2e4]))}
        return tf.Gemma3TextConfig(**base)
    base["rope_parameters"] = random_rope(r, rope, seq_max)
    if family == "llama":
        return tf.LlamaConfig(**base, head_dim=head_dim)
    if family == "mistral":
        return tf.MistralConfig(**base, head_dim=head_dim, sliding_window=window)
    if family == "qwen2":
        return tf.Qwen2Config(**dict(base, hidden_size=heads * head_dim))  # no head_dim key
    if family == "qwen3":
        return tf.Qwen3Config(**base, head_dim=head_dim)
    if family == "gemma":
        return tf.GemmaConfig(**base, head_dim=head_dim)
    raise ValueError(variant)


def multimodal(text_cfg, r):
    """A tiny Gemma3ForConditionalGeneration config around text_cfg. Its final logit soft-cap is
    unset, as in the released configs: transformers 5.23's Gemma3ForConditionalGeneration does not
    apply one (Gemma3ForCausalLM, and lmtrain's text model, do)."""
    text_cfg.final_logit_softcapping = None
    # transformers ties the head by the outer key; text_config's own is drawn apart, as files may
    # disagree (lmtrain must follow the outer one).
    tied = text_cfg.tie_word_embeddings
    text_cfg.tie_word_embeddings = r.random() < 0.5
    vision = tf.SiglipVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                   num_attention_heads=2, image_size=28, patch_size=14)
    return tf.Gemma3Config(text_config=text_cfg.to_dict(), vision_config=vision.to_dict(),
                           mm_tokens_per_image=4, boi_token_index=text_cfg.vocab_size - 3,
                           eoi_token_index=text_cfg.vocab_size - 2,
                           image_token_index=text_cfg.vocab_size - 1,
                           # transformers ties (or not) by the outer config's key
                           tie_word_embeddings=tied)


@contextlib.contextmanager
def float64_math():
    """Keeps a float64 model in float64 where transformers casts to float32 (see the header)."""
    to, flt, softmax = torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax

    def to64(self, *args, **kwargs):
        if self.dtype == torch.float64:
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            if kwargs.get("dtype") is torch.float32:
                kwargs["dtype"] = torch.float64
        return to(self, *args, **kwargs)

    def float64(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else flt(self, *args, **kwargs)

    def softmax64(x, dim=None, _stacklevel=3, dtype=None):
        if x.dtype == torch.float64 and dtype is torch.float32:
            dtype = None
        return softmax(x, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = to64, float64, softmax64
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = to, flt, softmax


def rope_float64(model):
    """RoPE modules: transformers' float32 angle, cos and sin in float64 (see the header)."""
    for m in model.modules():
        if not type(m).__name__.endswith("RotaryEmbedding"):
            continue
        orig = m.forward

        def forward(x, position_ids, layer_type=None, _orig=orig, _m=m):
            kw = {} if layer_type is None else {"layer_type": layer_type}
            _orig(x, position_ids, **kw)  # the dynamic update, as transformers runs it
            pre = "" if layer_type is None else f"{layer_type}_"
            inv = getattr(_m, pre + "inv_freq")
            inv = _TO(inv, dtype=torch.float32)
            pos = _TO(position_ids[..., None], dtype=torch.float32)
            emb = torch.cat((pos * inv, pos * inv), dim=-1).double()
            scale = getattr(_m, pre + "attention_scaling")
            return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)

        m.forward = forward


def reset_dynamic_rope(model):
    """A fresh RoPE state (transformers' dynamic RoPE keeps the longest length it has seen)."""
    for m in model.modules():
        if hasattr(m, "original_inv_freq") and hasattr(m, "original_max_seq_len"):
            m.register_buffer("inv_freq", m.original_inv_freq.clone(), persistent=False)
            m.max_seq_len_cached = m.original_max_seq_len


def packed_positions(r, T, min_len):
    """Positions of a row of T tokens packed from 2-3 documents, one of at least min_len."""
    first = r.randint(min(min_len, T - 2), T - 2)
    cuts = [first] + sorted(r.sample(range(first + 1, T), r.choice([0, 1])))
    pos, start = [], 0
    for end in cuts + [T]:
        pos += list(range(end - start))
        start = end
    return pos


def text_name(name):
    """lmtrain's (the text model's) name of a parameter of a multimodal gemma3."""
    return "model." + name[len("model.language_model."):] if name.startswith(
        "model.language_model.") else name


def write_ref(model, d, name, ids, positions, args):
    reset_dynamic_rope(model)
    model.zero_grad()
    kw = dict(input_ids=ids, labels=ids, use_cache=False)
    if positions is not None:
        kw["position_ids"] = torch.tensor([positions])
    res = model(**kw)
    res.loss.backward()
    out = {"input_ids": ids[0].tolist(), "loss": res.loss.item()}
    if positions is not None:
        out["positions"] = positions
    with open(os.path.join(d, f"ref_{name}.json"), "w") as f:
        json.dump(out, f)
    save_file({"logits": res.logits[0].detach().contiguous()},
              os.path.join(d, f"ref_{name}_logits.safetensors"))
    if args.token_scores:  # lm-evaluation-harness's HF loglikelihood: log_softmax, then argmax
        with torch.no_grad():
            logits = res.logits[0, :-1].detach()
            lp = torch.nn.functional.log_softmax(logits, dim=-1)
            target = ids[0, 1:]
            top2 = logits.topk(2, dim=-1).values
            save_file({"logprob": lp.gather(-1, target[:, None])[:, 0].contiguous(),
                       "greedy": (lp.argmax(dim=-1) == target).to(torch.int32).contiguous(),
                       "gap": (top2[:, 0] - top2[:, 1]).contiguous()},
                      os.path.join(d, f"ref_{name}_scores.safetensors"))
    grads = {text_name(n): p.grad.detach().contiguous() for n, p in model.named_parameters()
             if p.grad is not None}
    save_file(grads, os.path.join(d, f"ref_{name}_grads.safetensors"))


def make(name, args, seed):
    r = random.Random(seed)
    torch.manual_seed(seed)
    if args.random_config:
        lengths = sorted(r.sample(range(9, 40), 2))
        # Tied or not alternates with the seed, so one run of all variants has both.
        cfg = random_config(name, r, lengths, tied=seed % 2 == 0)
    else:
        lengths = [17, 29]
        cfg = FAMILIES[name]()
    if args.multimodal:
        cfg = multimodal(cfg, r)
    cfg._attn_implementation = "eager"
    if args.multimodal:
        cfg.text_config._attn_implementation = "eager"
        cfg.vision_config._attn_implementation = "eager"
        model = tf.Gemma3ForConditionalGeneration(cfg).float().eval()
    else:
        model = tf.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * args.noise)
            if args.save == "bf16":  # bf16 values, still float32 (RoPE buffers keep theirs)
                p.copy_(p.to(torch.bfloat16).float())
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    save = {} if args.max_shard_size is None else {"max_shard_size": args.max_shard_size}
    if args.save == "bf16":
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d, **save)
    else:
        model.save_pretrained(d, **save)
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))  # not read by lmtrain
    model.to(torch.float64 if args.float64 else torch.float32)  # exact: the saved values
    text = cfg.text_config if args.multimodal else cfg
    # Text ids (a multimodal model's last three ids are its image tokens), never pad_token_id:
    # transformers' embedding (padding_idx) gives the pad row no gradient, lmtrain does.
    n_ids = text.vocab_size - 3 if args.multimodal else text.vocab_size
    pad = getattr(text, "pad_token_id", None)

    def draw_ids(T):
        ids = torch.randint(0, n_ids - (pad is not None), (1, T))
        return ids + (ids >= pad).long() if pad is not None else ids

    refs = [(n, draw_ids(t), None) for n, t in zip("ab", lengths)]
    if args.packed:
        T = r.randint(max(lengths), PACKED_MAX)
        rope = getattr(cfg, "rope_parameters", None) or {}
        min_doc = cfg.max_position_embeddings + 1 if rope.get("rope_type") == "dynamic" else 4
        refs.append(("p", draw_ids(T), packed_positions(r, T, min_doc)))
    ctx = contextlib.nullcontext()
    if args.float64:
        rope_float64(model)
        ctx = float64_math()
    with ctx:
        for ref, ids, pos in refs:
            write_ref(model, d, ref, ids, pos, args)
    print(f"{name}: {d} (seed {seed})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", action="append",
                    help="a name of FAMILIES (default mode) or RANDOM (--random-config)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--random-config", action="store_true")
    ap.add_argument("--float64", action="store_true")
    ap.add_argument("--save", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--max-shard-size", default=None)
    ap.add_argument("--multimodal", action="store_true")
    ap.add_argument("--packed", action="store_true",
                    help="also ref_p: a row of documents whose positions restart")
    ap.add_argument("--noise", type=float, default=0.02, help="std of the noise on every tensor")
    ap.add_argument("--token-scores", action="store_true",
                    help="also ref_*_scores: log_softmax at the next token, argmax flags, top-two gap")
    a = ap.parse_args()
    names = RANDOM if a.random_config else FAMILIES
    for f in a.family or []:
        if f not in names:
            ap.error(f"unknown family {f} (known: {', '.join(sorted(names))})")
    if a.multimodal and any(not f.startswith("gemma3") for f in a.family or ["all"]):
        ap.error("--multimodal needs --family gemma3...")
    for i, fam in enumerate(a.family or sorted(names)):
        # A random config's seed depends on the family, not on which others run with it, so one
        # family alone replays what it drew among all.
        seed = (a.seed + zlib.crc32(fam.encode())) % 2**31 if a.random_config else a.seed + i
        make(fam, a, seed)


if __name__ == "__main__":
    main()
