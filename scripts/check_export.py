#!/usr/bin/env python3
"""Checks lmtrain's Hugging Face exports with transformers (run where torch + transformers are).

Reads the folder scripts/make_export_check.sh wrote: per family, exports f32/ and bf16/, the token
ids of a test sentence (ids.json) and lmtrain's logits of them (logits_<dtype>.safetensors,
loss_<dtype>.json). For each export: AutoModelForCausalLM.from_pretrained loads it (computing in
float32, so a bf16 export runs on exactly the weights lmtrain ran), its logits and loss must match
lmtrain's (max |diff| / max |ref| < 1e-4, loss relative < 1e-5), the bf16 logits must stay near
the f32 export's (< 5e-2), and AutoTokenizer, where tokenizer files exist, must give lmtrain's ids.
Prints one line per export; exits 1 on any failure.
    python3 scripts/check_export.py export_check
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

LOGITS_TOL, LOSS_TOL, BF16_VS_F32_TOL = 1e-4, 1e-5, 5e-2


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def check(family_dir, dtype, text, ids):
    d = family_dir / dtype
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    got = out.logits[0].float()
    ref = load_file(family_dir / f"logits_{dtype}.safetensors")["logits"]
    ref_loss = json.loads((family_dir / f"loss_{dtype}.json").read_text())["loss"]
    r = {"logits": rel(got, ref), "loss": abs(out.loss.item() - ref_loss) / abs(ref_loss)}
    ok = r["logits"] < LOGITS_TOL and r["loss"] < LOSS_TOL
    if dtype == "bf16":
        r["vs_f32"] = rel(got, load_file(family_dir / "logits_f32.safetensors")["logits"])
        ok = ok and r["vs_f32"] < BF16_VS_F32_TOL
    r["tokenizer"] = "-"
    if (d / "tokenizer.json").exists() or (d / "tokenizer.model").exists():
        hf_ids = AutoTokenizer.from_pretrained(d)(text)["input_ids"]
        r["tokenizer"] = "same ids" if hf_ids == ids else f"DIFFERENT {hf_ids[:12]}..."
        ok = ok and hf_ids == ids
    return ok, r


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "export_check")
    text = (root / "text.txt").read_text()
    families = sorted(p for p in root.iterdir() if (p / "ids.json").exists())
    if not families:
        sys.exit(f"{root}: no exports (run scripts/make_export_check.sh first)")
    print(f"{'family':<8} {'dtype':<5} {'logits rel':>10} {'loss rel':>9} {'vs f32':>9}  tokenizer  result")
    failed = 0
    for fam in families:
        ids = json.loads((fam / "ids.json").read_text())
        for dtype in ("f32", "bf16"):
            try:
                ok, r = check(fam, dtype, text, ids)
            except Exception as e:  # a directory transformers cannot load is a failure too
                ok, r = False, {"error": f"{type(e).__name__}: {e}"}
            failed += not ok
            if "error" in r:
                print(f"{fam.name:<8} {dtype:<5} FAIL {r['error']}")
                continue
            vs = f"{r['vs_f32']:9.2e}" if "vs_f32" in r else f"{'-':>9}"
            print(f"{fam.name:<8} {dtype:<5} {r['logits']:10.2e} {r['loss']:9.2e} {vs}  "
                  f"{r['tokenizer']:<9}  {'ok' if ok else 'FAIL'}")
    print(f"{2 * len(families) - failed} of {2 * len(families)} exports ok")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
