"""The peer of `lmtrain bench`: the same training step in PyTorch (transformers' model, AdamW,
clipping; with --lora, PEFT's LoRA on the same modules), on random tokens, in float32 on the CPU.
Prints one JSON object: tokens_per_s, step_ms, peak_rss_bytes. Run each mode in its own process
(peak RSS is per process), in the reference environment (scripts/setup.sh):

  python3 bench/torch_train_bench.py --config configs/bench/gemma3-270m.yaml [--lora 8] [--steps 2]
"""
import argparse
import json
import resource
import time

import torch
import yaml


def hf_config(model):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig
    family = model.get("family", "llama")
    keys = {k: v for k, v in model.items() if k != "family"}
    if family == "gpt2":  # lmtrain's names for GPT2Config's; gelu_pytorch_tanh is gelu_new there
        act = keys.get("hidden_act", "gelu_pytorch_tanh")
        return GPT2Config(vocab_size=keys["vocab_size"], n_embd=keys["hidden_size"],
                          n_layer=keys["num_hidden_layers"], n_head=keys["num_attention_heads"],
                          n_inner=keys["intermediate_size"],
                          n_positions=keys["max_position_embeddings"],
                          tie_word_embeddings=keys.get("tie_word_embeddings", True),
                          activation_function="gelu_new" if act == "gelu_pytorch_tanh" else act,
                          attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    if family == "gemma3":
        pattern = keys.pop("sliding_window_pattern", 6)
        layers = keys["num_hidden_layers"]
        keys["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                               for i in range(layers)]
        return Gemma3TextConfig(**keys)
    if family == "llama":
        return LlamaConfig(**keys)
    raise SystemExit(f"family {family}: not in this script yet")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[],
                    help="model.KEY=VALUE, as lmtrain bench --set (model keys only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = yaml.safe_load(open(a.config))
    for kv in a.set:
        key, value = kv.split("=", 1)
        section, name = key.split(".", 1)
        if section != "model":
            raise SystemExit(f"--set {kv}: only model keys here")
        cfg["model"][name] = yaml.safe_load(value)
    T = cfg["data"]["seq_len"]
    B = cfg.get("train", {}).get("micro_batch_size", 1)
    from transformers import AutoModelForCausalLM
    hc = hf_config(cfg["model"])
    hc._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hc, dtype=torch.float32)
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            r=a.lora, lora_alpha=2 * a.lora,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"]))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0)
    ids = torch.randint(0, hc.vocab_size, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    mean = sum(times) / len(times)
    print(json.dumps({
        "peer": f"torch {torch.__version__}, transformers, {'PEFT LoRA r=%d' % a.lora if a.lora else 'full'}",
        "tokens_per_s": B * T / mean, "step_ms": mean * 1e3,
        "trainable_params": sum(p.numel() for p in params),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
