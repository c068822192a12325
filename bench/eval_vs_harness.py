#!/usr/bin/env python3
"""`lmtrain eval` beside lm-evaluation-harness (its Hugging Face backend, f32 on the CPU) on the
same model directory, the same task file and the same machine: documents per second, whole
process (start, model load, scoring), the two run in turn; their accuracies must agree.

  python3 bench/eval_vs_harness.py MODEL_DIR [--docs 400] [--shots 2] [--batch 8] [--runs 3]

MODEL_DIR: a Hugging Face directory with its tokenizer (`lmtrain export` of a run, or `lmtrain
init --tokenizer`). The task is made here: a multiple-choice task of 4 choices on random words
(lm-evaluation-harness's YAML, local JSON data). Run it in the reference environment (the venv
scripts/setup.sh makes); LMTRAIN (default build/lmtrain) is the binary. Stdlib and lm_eval only.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LMTRAIN = os.environ.get("LMTRAIN", os.path.join(ROOT, "build", "lmtrain"))
WORDS = ("the of and to in is was he for it with as his on be at by had are but from or "
         "have an they which one you were all we her she there would their will when who him "
         "been has more if no out so said what up its about into than them can only other new "
         "some could time these two may then do first any my now such like our over man me even "
         "most made after also did many before must through back years where much your way well "
         "down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three").split()


def write_task(tmp, docs, shots, seed=0):
    rng = random.Random(seed)
    data = os.path.join(tmp, "docs.jsonl")
    with open(data, "w") as f:
        for _ in range(docs):
            ctx = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 60)))
            choices = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 10)))
                       for _ in range(4)]
            f.write(json.dumps({"ctx": ctx, "choices": choices, "label": rng.randrange(4)}) + "\n")
    task = os.path.join(tmp, "bench_mc.yaml")
    with open(task, "w") as f:
        f.write(f"""task: bench_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
fewshot_split: test
num_fewshot: {shots}
output_type: multiple_choice
doc_to_text: "{{{{ctx}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
  - metric: acc_norm
""")
    return task


def timed(cmd, env):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--shots", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="eval_bench_")
    task = write_task(tmp, a.docs, a.shots)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_HOME=os.path.join(tmp, "hf"), TOKENIZERS_PARALLELISM="false")
    ours_out, theirs_out = os.path.join(tmp, "ours", "r.json"), os.path.join(tmp, "theirs")
    ours = [LMTRAIN, "eval", "--model", a.model, "--tasks", task, "--batch", str(a.batch),
            "--out", ours_out]
    theirs = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
              f"pretrained={a.model},dtype=float32", "--tasks", "bench_mc", "--include_path",
              tmp, "--batch_size", str(a.batch), "--device", "cpu", "--output_path", theirs_out]
    walls = {"lmtrain": [], "harness": []}
    for _ in range(a.runs):
        walls["lmtrain"].append(timed(ours, env))
        walls["harness"].append(timed(theirs, env))
    acc = json.load(open(ours_out))["results"]["bench_mc"]["acc,none"]
    ref = [os.path.join(d, f) for d, _, fs in os.walk(theirs_out) for f in fs
           if f.startswith("results_")]
    ref_acc = json.load(open(sorted(ref)[-1]))["results"]["bench_mc"]["acc,none"]
    print(f"model {a.model}; {a.docs} documents x 4 choices, {a.shots}-shot, batch {a.batch}; "
          f"{os.cpu_count()} CPUs; {a.runs} runs each, in turn")
    for name, w in walls.items():
        med = statistics.median(w)
        print(f"  {name:8s} median {med:7.2f} s  ({a.docs / med:7.1f} documents/s; runs "
              f"{', '.join(f'{x:.2f}' for x in w)})")
    print(f"  lmtrain / harness time: {statistics.median(walls['lmtrain']) / statistics.median(walls['harness']):.3f}")
    print(f"  acc: lmtrain {acc:.4f}, harness {ref_acc:.4f}")
    if abs(acc - ref_acc) > 1e-9:
        sys.exit("the accuracies differ")


if __name__ == "__main__":
    main()
