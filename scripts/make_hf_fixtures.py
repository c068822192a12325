#!/usr/bin/env python3
"""Makes Hugging Face reference fixtures for lmtrain's parity tests (tests/hf), one directory per
family, in the layout of shared/fixtures/hf:

  <out>/<family>/config.json, model.safetensors   tiny model: save_pretrained after random init with
                                                  N(0, 0.02) noise on every parameter
  <out>/<family>/ref_{a,b}.json                   input_ids (one sequence) and loss (mean next-token
                                                  cross-entropy, labels = input_ids)
  <out>/<family>/ref_{a,b}_logits.safetensors     logits, float32 [T, vocab]
  <out>/<family>/ref_{a,b}_grads.safetensors      d loss / d parameter, by Hugging Face name

Needs torch, transformers and safetensors (the GPU machine has them; CPU math, float32, eager
attention). Run: python3 scripts/make_hf_fixtures.py --out tests/data/hf [--family gemma3 ...]
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
import transformers as tf

COMMON = dict(vocab_size=256, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

FAMILIES = {
    "llama": lambda: tf.LlamaConfig(**COMMON, tie_word_embeddings=False),
    "llama_tied_llama3rope": lambda: tf.LlamaConfig(
        **COMMON, tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=16)),
    # YaRN: head 8, theta 1e4, original 64 -> correction range dims 0..2 of 4 (so both the kept
    # and the interpolated frequencies occur), attention factor 0.1 ln 4 + 1. factor equals
    # max_position_embeddings / original (256 / 64), so transformers 4.4x-4.5x, which replaced
    # factor by that ratio, agree with transformers 5, which uses the explicit factor.
    "llama_yarn": lambda: tf.LlamaConfig(
        **COMMON, rope_scaling=dict(rope_type="yarn", factor=4.0,
                                    original_max_position_embeddings=64)),
    # Dynamic NTK: max_position_embeddings 16 is below both sequences (17 and 29 tokens), so each
    # forward grows the base for its own length. make() runs ref_a before the longer ref_b, so
    # transformers' cached frequencies are those of the current length each time, which is what
    # lmtrain computes per batch (a shorter call after a longer one would reuse the longer one's).
    "llama_dynamic": lambda: tf.LlamaConfig(
        **dict(COMMON, max_position_embeddings=16),
        rope_scaling=dict(rope_type="dynamic", factor=2.0)),
    "mistral_swa": lambda: tf.MistralConfig(**COMMON, sliding_window=8),
    "qwen2": lambda: tf.Qwen2Config(**COMMON),
    "qwen3": lambda: tf.Qwen3Config(**COMMON, head_dim=16),
    "gemma": lambda: tf.GemmaConfig(**COMMON, head_dim=16),
    "gemma2": lambda: tf.Gemma2Config(**COMMON, head_dim=16, sliding_window=8,
                                      query_pre_attn_scalar=16),
    "gemma3": lambda: tf.Gemma3TextConfig(
        **dict(COMMON, num_hidden_layers=6), head_dim=16, sliding_window=8,
        query_pre_attn_scalar=16, rope_local_base_freq=10000.0),
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


def make(family, out, seed):
    torch.manual_seed(seed)
    cfg = FAMILIES[family]()
    cfg._attn_implementation = "eager"
    model = tf.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    d = os.path.join(out, family)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)
    for name, length in (("a", 17), ("b", 29)):
        ids = torch.randint(0, cfg.vocab_size, (1, length))
        model.zero_grad()
        res = model(input_ids=ids, labels=ids)
        res.loss.backward()
        with open(os.path.join(d, f"ref_{name}.json"), "w") as f:
            json.dump({"input_ids": ids[0].tolist(), "loss": res.loss.item()}, f)
        save_file({"logits": res.logits[0].detach().contiguous()},
                  os.path.join(d, f"ref_{name}_logits.safetensors"))
        grads = {n: p.grad.detach().contiguous() for n, p in model.named_parameters()
                 if p.grad is not None}
        save_file(grads, os.path.join(d, f"ref_{name}_grads.safetensors"))
    print(f"{family}: {d}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES))
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    for i, fam in enumerate(a.family or sorted(FAMILIES)):
        make(fam, a.out, a.seed + i)


if __name__ == "__main__":
    main()
