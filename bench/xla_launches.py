"""Kernel launches of one run of a GPU program, from the files XLA writes with xla_dump_to: the
same count as lmtrain's own (src/backend/pjrt/runtime/launches.cpp), for the JAX peer's step
compiled deviceless, so that both sides are counted alike. Each thunk of the thunk sequence once,
each loop's thunks times its known trip count (the loop's HLO instruction found through the
thunks' metadata), the parts of a fused thunk (indented below it) not again; loops and the
completion of asynchronous work (*Done) launch nothing; copies count.

  python3 bench/xla_launches.py DUMP_DIR     prints {"total", "static_thunks", "by_kind", ...}
"""
import glob
import json
import os
import re
import sys

CONTAINERS = {"kWhile", "kSequential", "kCommandBuffer", "kConditional"}


def launch_kind(kind, name):
    if kind == "kCopy":
        return "copy"
    if kind == "kCuDnn":
        return "cudnn"
    if kind in ("kGemm", "kCublasLtMatmul") or name.startswith("gemm_fusion") or "cublas" in name:
        return "matmul"
    if kind not in ("kCustomKernel", "kKernel", "kTriton"):
        return kind[1:] if len(kind) > 1 and kind[0] == "k" else kind
    while re.search(r"[._][0-9]+$", name):
        name = re.sub(r"[._][0-9]+$", "", name)
    return name or "kernel"


def count(sequence, metadata, hlo):
    names = {}
    for block in metadata.split("thunk_metadata {")[1:]:
        a = re.search(r'profile_annotation:\s*"([^"]*)"', block)
        if a:
            i = re.search(r"thunk_id:\s*([0-9]+)", block)
            names[int(i.group(1)) if i else 0] = a.group(1)
    trips = {}
    for line in hlo.splitlines():
        w = re.search(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*\swhile\(", line)
        t = re.search(r'"known_trip_count":\{"n":"([0-9]+)"', line)
        if w and t:
            trips[w.group(1)] = int(t.group(1))
    out = {"total": 0, "static_thunks": 0, "loops_without_trip_count": 0, "by_kind": {}}
    stack = []  # (indent, kind, trips)
    for line in sequence.splitlines():
        m = re.match(r"^(\s*)([0-9]+):\s+(k\w+)\s*\[[^\]]*\]\s*(\S*)", line)
        if not m:
            continue
        indent, tid, kind, name = len(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        part = bool(stack) and stack[-1][1] not in CONTAINERS
        times = 1
        for f in stack:
            times *= f[2]
        loop = 1
        if kind == "kWhile":
            n = trips.get(names.get(tid, ""))
            if n is not None:
                loop = n
            elif not part:
                out["loops_without_trip_count"] += 1
        stack.append((indent, kind, loop))
        if part or kind in CONTAINERS or kind.endswith("Done"):
            continue
        out["total"] += times
        out["static_thunks"] += 1
        k = launch_kind(kind, name)
        out["by_kind"][k] = out["by_kind"].get(k, 0) + times
    return out


def count_dir(d):
    def one(suffix):
        found = [p for p in glob.glob(os.path.join(d, "*")) if p.endswith(suffix)]
        if not found:
            raise SystemExit(f"XLA's dump in {d} has no *{suffix}")
        return open(sorted(found)[-1]).read()
    return count(one(".thunk_sequence.txt"), one(".thunk_metadata.txt"),
                 one("_gpu_after_optimizations.txt"))


if __name__ == "__main__":
    print(json.dumps(count_dir(sys.argv[1])))
