"""lmtrain's GGUF exports run through llama.cpp itself (by hand; not part of the suite, whose CI
budget has no room for building llama.cpp). For each family of tests/reference/test_gguf.py it
makes the same random model, exports it in f32, bf16 and Q8_0, and runs scripts/gguf_llamacpp_run.cpp
against llama.cpp's library: the ids llama.cpp tokenizes the test text to, and its logits, against
lmtrain's on the source model.

  # llama.cpp built as a library, e.g. the one llama-cpp-python's sdist vendors:
  #   pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf ...
  #   cmake -S .../vendor/llama.cpp -B build -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
  #         -DGGML_F16C=ON -DLLAMA_CURL=OFF && cmake --build build -j --target llama
  ~/.cache/lmtrain/venv/bin/python scripts/gguf_llamacpp_check.py LLAMA_CPP_SRC LLAMA_CPP_BUILD \
      [family ...]
"""
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reference"))
os.environ.setdefault("LMTRAIN_BIN", str(ROOT / "build" / "lmtrain"))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import test_gguf as tg  # noqa: E402
from conftest import lmtrain  # noqa: E402


# RoPE scalings transformers' GGUF loader ignores, so that only llama.cpp checks them (the test
# text twice, 60 positions, past the original context of 16).
ROPE_VARIANTS = {
    "llama_rope_linear": {"rope_type": "linear", "rope_factor": 4},
    "llama_rope_llama3": {"rope_type": "llama3", "rope_factor": 8, "rope_low_freq_factor": 1,
                          "rope_high_freq_factor": 4, "rope_original_max_position_embeddings": 16},
}


def main():
    src, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    families = sys.argv[3:] or [*tg.FAMILIES, *ROPE_VARIANTS]
    lib = next(p.parent for p in build.rglob("libllama.so"))
    work = pathlib.Path(tempfile.mkdtemp(prefix="lmtrain_gguf_llamacpp_"))
    run = work / "run"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{src}/include", f"-I{src}/ggml/include",
                    str(ROOT / "scripts" / "gguf_llamacpp_run.cpp"), "-o", str(run), f"-L{lib}",
                    "-lllama", "-lggml", "-lggml-base"], check=True)
    llama = dict(tg.FAMILIES["llama"])
    for fam in families:
        tg.FAMILIES["llama"] = llama
        tmp = work / fam
        tmp.mkdir()
        model = fam
        if fam in ROPE_VARIANTS:
            model = "llama"
            tg.FAMILIES["llama"] = {"num_attention_heads": 4, "num_key_value_heads": 2,
                                    **ROPE_VARIANTS[fam]}
        src_dir, tok, _ = tg.make_model(model, tmp, random.Random(7))
        text = tg.SP_TEXT if fam == "llama_sp" else tg.TEXT
        if fam in ROPE_VARIANTS:
            text = text + " " + text
        ids = json.loads(lmtrain("tokenize", "--tokenizer", tok, "--add-special", "--text",
                                 text).stdout)[:60]  # run's context is 64
        (tmp / "ids.json").write_text(json.dumps(ids))
        lmtrain("logits", "--model", src_dir, "--ids-file", tmp / "ids.json", "--out",
                tmp / "logits.safetensors", "--threads", 1)
        ref = load_file(tmp / "logits.safetensors")["logits"]
        for dtype in ("f32", "bf16", "q8_0"):
            path = tmp / f"{fam}-{dtype}.gguf"
            lmtrain("export", "--checkpoint", src_dir, "--format", "gguf", "--dtype", dtype,
                    "--out", path)
            r = subprocess.run([str(run), str(path), text, *map(str, ids)], capture_output=True,
                               text=True, env={**os.environ, "LD_LIBRARY_PATH": str(lib)})
            lines = r.stdout.splitlines()
            if r.returncode != 0 or not lines or not lines[0].startswith("TOK"):
                print(f"{fam:<18}{dtype:<5} FAILED (exit {r.returncode}): {r.stderr[-300:]}")
                continue
            toks = [int(x) for x in lines[0].split()[1:]][:len(ids)]
            logits = torch.tensor([[float(x) for x in line.split()[1:]]
                                   for line in lines[1:] if line.startswith("LOGITS")])
            logits = logits[:, :ref.shape[1]]
            rel = ((logits - ref).abs().max() / ref.abs().max()).item()
            print(f"{fam:<18}{dtype:<5} logits {rel:.2e}, ids "
                  f"{'the same' if toks == ids else 'DIFFER: ' + str(toks)}")


if __name__ == "__main__":
    main()
