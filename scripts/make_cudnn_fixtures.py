#!/usr/bin/env python3
"""Extracts from StableHLO programs that JAX made with cuDNN attention (the gzip'd
`*_cudnn*.stablehlo.mlir.gz` of an H100 sitting) what tests/pjrt/test_cudnn_attention.cpp
compares lmtrain's training-step programs with, into small text fixtures under tests/data/cudnn:

  tokens TYPE               @main's token-id argument (the only rank-2 i32 argument): B and T
  embedding TYPE            @main's largest rank-2 f32 argument (the embedding table): the vocab
  count TARGET N            how many custom calls to TARGET (__cudnn$...) the program holds
  call LINE                 the first call of each text that differs once SSA names (%12, %7#1)
                            are set aside, verbatim (leading spaces stripped)

    python3 scripts/make_cudnn_fixtures.py --out tests/data/cudnn --note "..." FILE.mlir.gz ...

writes one <name>.txt per input (name: the file name without .stablehlo.mlir.gz). Standard
library only.
"""
import argparse
import gzip
import os
import re
from collections import Counter

CALL = re.compile(r"stablehlo\.custom_call @(__cudnn\$\w+)\(")
ARG = re.compile(r"%arg\d+: tensor<([0-9x]+)x(\w+)>")
SSA = re.compile(r"%[A-Za-z0-9_]+(#\d+)?")


def elements(dims):
    n = 1
    for d in dims.split("x"):
        n *= int(d)
    return n


def extract(text):
    main = next(line for line in text.splitlines() if "func.func public @main(" in line)
    params = main.split(") -> ")[0]  # the arguments, not the results
    args = ARG.findall(params)
    tokens = [d for d, t in args if t == "i32" and d.count("x") == 1]
    tables = [d for d, t in args if t == "f32" and d.count("x") == 1]
    if len(tokens) != 1 or not tables:
        raise SystemExit("no single rank-2 i32 argument, or no rank-2 f32 argument, in @main")
    embedding = max(tables, key=elements)
    counts, firsts, seen = Counter(), [], set()
    for line in text.splitlines():
        m = CALL.search(line)
        if not m:
            continue
        counts[m.group(1)] += 1
        key = SSA.sub("%_", line.strip())
        if key not in seen:
            seen.add(key)
            firsts.append(line.strip())
    out = [f"tokens tensor<{tokens[0]}xi32>", f"embedding tensor<{embedding}xf32>"]
    out += [f"count {t} {n}" for t, n in sorted(counts.items())]
    out += [f"call {line}" for line in firsts]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="", help="where the programs came from (a comment line)")
    ap.add_argument("programs", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for path in a.programs:
        name = os.path.basename(path).replace(".stablehlo.mlir.gz", "")
        with gzip.open(path, "rt") as f:
            lines = extract(f.read())
        head = [f"# {os.path.basename(path)}, extracted by scripts/make_cudnn_fixtures.py"]
        if a.note:
            head.append(f"# {a.note}")
        with open(os.path.join(a.out, name + ".txt"), "w") as f:
            f.write("\n".join(head + lines) + "\n")


if __name__ == "__main__":
    main()
