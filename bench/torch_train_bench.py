"""The peer of `lmtrain bench`: the same training step in PyTorch (transformers' model, AdamW,
clipping; with --lora, PEFT's LoRA on the same modules), on random tokens, in float32 on the CPU by
default. Prints one JSON object: tokens_per_s, step_ms, peak_rss_bytes (and device_peak_bytes on a
GPU). Run each mode in its own process (peak RSS is per process), in the reference environment
(scripts/setup.sh):

  python3 bench/torch_train_bench.py --config configs/bench/gemma3-270m.yaml [--lora 8] [--steps 2]
  python3 bench/torch_train_bench.py --config configs/bench/llama-1b.yaml --device cuda \
      --precision bf16 --compile [--set train.activation_checkpointing=true]

--precision bf16 runs the forward under torch.autocast(bfloat16) with f32 weights and AdamW; AdamW
is torch's fused one (--adamw foreach: its multi-tensor one, faster on some CPUs); --compile wraps
the model in torch.compile; --set takes model keys and
data.seq_len, train.micro_batch_size, train.precision and train.activation_checkpointing (the
model's gradient checkpointing).
"""
import argparse
import json
import resource
import time

import torch
import yaml


# lmtrain's flat RoPE keys, and the rope_scaling entries transformers reads for each rope_type.
ROPE_PARAMETERS = {"rope_factor": "factor", "rope_low_freq_factor": "low_freq_factor",
                   "rope_high_freq_factor": "high_freq_factor",
                   "rope_original_max_position_embeddings": "original_max_position_embeddings",
                   "rope_attention_factor": "attention_factor", "rope_beta_fast": "beta_fast",
                   "rope_beta_slow": "beta_slow", "rope_mscale": "mscale",
                   "rope_mscale_all_dim": "mscale_all_dim", "rope_truncate": "truncate"}
ROPE_TYPE_KEYS = {
    "default": (), "linear": ("factor",), "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate")}
ROPE_DEFAULTS = {"factor": 1.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "beta_fast": 32.0,
                 "beta_slow": 1.0, "truncate": True}


def llama_keys(keys):
    """lmtrain's keys of a llama / mistral / qwen2 model as transformers' config arguments: the RoPE
    scaling as rope_scaling, the 0 / -1 that mean "unset" in lmtrain left out."""
    keys = dict(keys)
    rope_type = keys.pop("rope_type", "default")
    given = {ROPE_PARAMETERS[k]: keys.pop(k) for k in list(keys) if k in ROPE_PARAMETERS}
    if rope_type != "default":
        rope = {"rope_type": rope_type}
        for k in ROPE_TYPE_KEYS[rope_type]:
            v = given.get(k, ROPE_DEFAULTS.get(k, 0))
            if k == "original_max_position_embeddings" and not v:
                v = keys.get("max_position_embeddings", 2048)
            if v or k in ROPE_DEFAULTS:  # yarn's 0 = derived: left to transformers
                rope[k] = v
        keys["rope_scaling"] = rope
    for k, unset in (("head_dim", 0), ("num_key_value_heads", 0), ("bos_token_id", -1),
                     ("eos_token_id", -1), ("sliding_window", 0), ("sliding_window_pattern", 0),
                     ("rope_local_base_freq", 0), ("attn_logit_softcapping", 0),
                     ("final_logit_softcapping", 0), ("query_pre_attn_scalar", 0)):
        if k in keys and keys[k] == unset:
            del keys[k]
    return keys


def hf_config(model):
    from transformers import (Gemma3TextConfig, GPT2Config, LlamaConfig, MistralConfig,
                              Qwen2Config)
    family = model.get("family", "llama")
    keys = {k: v for k, v in model.items() if k != "family"}
    if family == "gpt2":  # lmtrain's names for GPT2Config's; gelu_pytorch_tanh is gelu_new there
        act = keys.get("hidden_act", "gelu_pytorch_tanh")
        return GPT2Config(vocab_size=keys["vocab_size"], n_embd=keys["hidden_size"],
                          n_layer=keys["num_hidden_layers"], n_head=keys["num_attention_heads"],
                          n_inner=keys.get("intermediate_size", 4 * keys["hidden_size"]),
                          n_positions=keys["max_position_embeddings"],
                          layer_norm_epsilon=keys.get("rms_norm_eps", 1e-5),
                          initializer_range=keys.get("initializer_range", 0.02),
                          tie_word_embeddings=keys.get("tie_word_embeddings", True),
                          activation_function="gelu_new" if act == "gelu_pytorch_tanh" else act,
                          **{k: keys[k] if keys[k] >= 0 else None
                             for k in ("bos_token_id", "eos_token_id") if k in keys},
                          attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    if family == "gemma3":
        pattern = keys.pop("sliding_window_pattern", 6)
        layers = keys["num_hidden_layers"]
        keys["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                               for i in range(layers)]
        return Gemma3TextConfig(**keys)
    if family == "llama":
        return LlamaConfig(**llama_keys(keys))
    if family == "mistral":
        return MistralConfig(**llama_keys(keys))
    if family == "qwen2":
        keys = llama_keys(keys)
        keys.pop("attention_bias", None)  # always on in Qwen2
        if keys.get("sliding_window"):
            raise SystemExit("qwen2 with a sliding window: not in this script yet")
        return Qwen2Config(**keys)
    raise SystemExit(f"family {family}: not in this script yet")


SET_KEYS = {"data.seq_len", "train.micro_batch_size", "train.precision",
            "train.activation_checkpointing"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--adamw", choices=["fused", "foreach"], default="fused",
                    help="torch's AdamW implementation (default fused)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", choices=("f32", "bf16"),
                    help="bf16: autocast the forward to bfloat16 (default: train.precision, f32)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--set", action="append", default=[],
                    help="model.KEY=VALUE (or " + ", ".join(sorted(SET_KEYS)) + "), as lmtrain "
                         "bench --set")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = yaml.safe_load(open(a.config))
    for kv in a.set:
        key, value = kv.split("=", 1)
        section, name = key.split(".", 1)
        if section != "model" and key not in SET_KEYS:
            raise SystemExit(f"--set {kv}: only model keys and {', '.join(sorted(SET_KEYS))} here")
        cfg.setdefault(section, {})[name] = yaml.safe_load(value)
    T = cfg["data"]["seq_len"]
    train = cfg.get("train") or {}
    B = train.get("micro_batch_size", 1)
    precision = a.precision or train.get("precision", "f32")
    device = torch.device(a.device)
    from transformers import AutoModelForCausalLM
    hc = hf_config(cfg["model"])
    hc._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hc, dtype=torch.float32).to(device)
    if train.get("activation_checkpointing"):
        model.gradient_checkpointing_enable()
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            r=a.lora, lora_alpha=2 * a.lora,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"]))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0,
                            fused=a.adamw == "fused", foreach=a.adamw == "foreach")
    ids = torch.randint(0, hc.vocab_size, (B, T)).to(device)
    forward = torch.compile(model) if a.compile else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = forward(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(2 if a.compile else 1):  # warm-up (compiled: a second call may recompile)
        step()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    mean = sum(times) / len(times)
    print(json.dumps({
        "peer": f"torch {torch.__version__}, transformers, {'PEFT LoRA r=%d' % a.lora if a.lora else 'full'}",
        "adamw": a.adamw,
        "runner": "torch", "device": str(device), "precision": precision, "compile": a.compile,
        "tokens_per_s": B * T / mean, "step_ms": mean * 1e3,
        "step_ms_median": sorted(times)[len(times) // 2] * 1e3,
        "trainable_params": sum(p.numel() for p in params),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device_peak_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None}))


if __name__ == "__main__":
    main()
