"""JAX's figures for the deviceless CI test (tests/pjrt/test_deviceless.cpp): the JAX peer's
training step (bench/jax_train_bench.py, bf16, cuDNN attention) compiled for an H200 through XLA's
CUDA plugin with no GPU, on the three shapes of docs/performance.md, its kernel launches per step
and XLA's memory written to tests/data/deviceless/jax_h200.json. lmtrain's step must launch no
more kernels than these and need no more memory. Run it again when the pinned plugin changes
(scripts/requirements.txt: jax-cuda13-pjrt), in the environment scripts/setup.sh makes:

  python3 bench/jax_deviceless_figures.py [--out tests/data/deviceless/jax_h200.json]
"""
import argparse
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name, config, --set overrides (both sides take them), checkpointed (lmtrain's
# train.activation_checkpointing, JAX's --remat)
SHAPES = [
    ("gpt2-124m B16 T1024", "configs/bench/gpt2-124m.yaml",
     ["train.micro_batch_size=16", "data.seq_len=1024"], False),
    ("llama-1b B4 T2048", "configs/bench/llama-1b.yaml",
     ["train.micro_batch_size=4", "data.seq_len=2048"], False),
    ("llama-1b B1 T32768 checkpointed", "configs/bench/llama-1b.yaml",
     ["train.micro_batch_size=1", "data.seq_len=32768"], True),
]


def jax_figures(config, sets, remat, target):
    cmd = [sys.executable, os.path.join(HERE, "jax_train_bench.py"), "--config",
           os.path.join(ROOT, config), "--precision", "bf16", "--attention", "cudnn",
           "--target", target]
    for s in sets:
        cmd += ["--set", s]
    if remat:
        cmd.append("--remat")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return {"launches": j["launches"]["total"], "step_bytes": j["device_fit"]["step_bytes"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "deviceless",
                                                  "jax_h200.json"))
    ap.add_argument("--target", default="h200")
    a = ap.parse_args()
    figures = {
        "what": "the JAX peer's bf16 training step (cuDNN attention) compiled deviceless "
                "for the target by XLA's CUDA plugin: kernel launches per step and XLA's "
                "memory (arguments + temporaries + the outputs not written into donated arguments, as "
                "device_fit.step_bytes of lmtrain bench --target); made by "
                "bench/jax_deviceless_figures.py",
        "target": a.target,
        "jax": importlib.metadata.version("jax"),
        "plugin": "jax-cuda13-pjrt " + importlib.metadata.version("jax-cuda13-pjrt"),
        "date": datetime.date.today().isoformat(),
        "shapes": [],
    }
    for name, config, sets, remat in SHAPES:
        f = jax_figures(config, sets, remat, a.target)
        print(f"{name}: {f['launches']} launches, {f['step_bytes'] / 2**30:.2f} GiB", flush=True)
        figures["shapes"].append({"name": name, "config": config, "sets": sets,
                                  "checkpointed": remat, **f})
    with open(a.out, "w") as f:
        json.dump(figures, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
