"""The output head and its cross-entropy in PyTorch, forward and backward, as the peer of
`lmtrain bench --head-loss` (docs/performance.md, "The loss head"): logits = h @ w.T in bf16 for
every token at once, F.cross_entropy on them upcast to float32 (what a plain PyTorch training loop
does), backward into h and w. Prints one JSON line: time per call (CUDA events, after a warm-up),
tokens/s and the peak memory the call allocated beyond its inputs.
    torch_head_loss_bench.py --tokens N [--vocab V --hidden C --steps S]
"""
import argparse
import json

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    h = torch.randn(a.tokens, a.hidden, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(a.vocab, a.hidden, device=dev, dtype=torch.bfloat16) * 0.02).requires_grad_()
    labels = torch.randint(0, a.vocab, (a.tokens,), device=dev)

    def call():
        h.grad = None
        w.grad = None
        logits = h @ w.t()
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        return loss

    result = {"runner": "torch", "mode": "full", "tokens": a.tokens, "vocab_size": a.vocab,
              "hidden_size": a.hidden, "torch": torch.__version__,
              "device": torch.cuda.get_device_name()}
    try:
        call()  # warm-up
        torch.cuda.synchronize()
        h.grad = w.grad = None
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.steps):
            loss = call()
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / a.steps
        result.update({"call_ms": ms, "tokens_per_s": a.tokens / ms * 1e3,
                       "peak_bytes_beyond_inputs": torch.cuda.max_memory_allocated() - base,
                       "loss": loss.item()})
    except torch.OutOfMemoryError as e:
        result["error"] = "out of memory: " + str(e).splitlines()[0]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
