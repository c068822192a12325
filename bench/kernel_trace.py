"""Reads traces of bench/kernel_trace.cpp (CSV: start_ns,end_ns,stream,name; gzip or plain) and
prints, for each, one training step's GPU time by kind of kernel, side by side.

A step is found as the trace's repeating tail: the smallest P such that the last P kernel names
equal the P before them (the bench's timed steps run the same program, or the same sequence of
kernels, each step). Kinds are read off the kernel names: cuBLAS/CUTLASS matrix products, cuDNN's
flash attention, XLA's fusions (Triton-emitted kCustom fusions, loop, reduction and input fusions
by XLA's naming), PyTorch/Inductor's Triton kernels, copies and the rest.

  python3 bench/kernel_trace.py lmtrain=trace1.csv.gz jax=trace2.csv.gz [--top 15]
"""
import argparse
import collections
import csv
import gzip
import re


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = [(int(r["start_ns"]), int(r["end_ns"]), r["name"]) for r in csv.DictReader(f)]
    rows.sort()
    return rows


def last_step(rows, min_period=50):
    names = [r[2] for r in rows]
    n = len(names)
    for p in range(min_period, n // 2 + 1):
        if names[n - p:] == names[n - 2 * p:n - p]:
            return rows[n - p:]
    raise SystemExit(f"no repeating step in {n} kernels")


KINDS = [  # (kind, pattern on the kernel name), the first match taking it
    ("attention (cuDNN)", r"cudnn|fmha|flash|sdpa|_attn|attention"),
    ("matmul (cuBLAS, CUTLASS)", r"gemm|xmma|cutlass|cublas|matmul|sm90_|nvjet|ampere_|_mma"),
    ("XLA Triton fusion", r"^(fusion|triton_softmax|triton_gemm|gemm_fusion|block_fusion)"),
    ("XLA loop fusion", r"^(loop_|wrapped_|.*_fusion$|.*_fusion_\d+$)"),
    ("XLA reduction fusion", r"^(input_|reduce)"),
    ("Inductor Triton", r"^triton_"),
    ("copy / transpose", r"copy|transpose|memcpy|memset|concat"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.I):
            return kind
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+", help="label=path")
    ap.add_argument("--top", type=int, default=12, help="longest kernels listed per trace")
    a = ap.parse_args()
    steps = {}
    for spec in a.traces:
        label, path = spec.split("=", 1)
        steps[label] = last_step(load(path))
    labels = list(steps)
    kinds = collections.OrderedDict()
    for label, rows in steps.items():
        for s, e, name in rows:
            kinds.setdefault(kind_of(name), {}).setdefault(label, [0, 0.0])
            cell = kinds[kind_of(name)][label]
            cell[0] += 1
            cell[1] += (e - s) / 1e6
    w = max(len(k) for k in kinds) + 2
    print(f"{'one step':<{w}}" + "".join(f"{l:>24}" for l in labels))
    for kind, by in kinds.items():
        cells = [by.get(l, [0, 0.0]) for l in labels]
        print(f"{kind:<{w}}" + "".join(f"{c[1]:>14.2f} ms {c[0]:>5}k" for c in cells))
    spans = [(rows[-1][1] - rows[0][0]) / 1e6 for rows in steps.values()]
    totals = [sum(e - s for s, e, _ in rows) / 1e6 for rows in steps.values()]
    print(f"{'kernel time':<{w}}" + "".join(f"{t:>14.2f} ms {len(r):>5}k"
                                             for t, r in zip(totals, steps.values())))
    print(f"{'first start to last end':<{w}}" + "".join(f"{s:>17.2f} ms" + " " * 7 for s in spans))
    for label, rows in steps.items():
        by_name = collections.defaultdict(lambda: [0, 0.0])
        for s, e, name in rows:
            by_name[name][0] += 1
            by_name[name][1] += (e - s) / 1e6
        print(f"\n{label}: the {a.top} kernels with the most time in the step")
        for name, (count, ms) in sorted(by_name.items(), key=lambda x: -x[1][1])[:a.top]:
            print(f"  {ms:8.2f} ms {count:4d}x  {name[:110]}")


if __name__ == "__main__":
    main()
