#!/usr/bin/env python3
"""The seeds' runs, compiled deviceless (docs/parallel.md, "The seeds' runs, compiled").

Each run is a model, a mesh and a target. `run` compiles it through `lmtrain info --pjrt --target`
(or `lmtrain bench --target` for LoRA, which info's mesh plan does not count) at a few small layer
counts, one compile at a time, keeping each JSON under bench/results/seeds-<date>/ (a compile
already there is not repeated, so an interrupted sweep resumes). `fit` fits XLA's memory
(arguments, temporaries per device) and collectives (count and bytes sent per device, per kind)
with a line in the layer count, prints the largest residual of each fit, and extrapolates to the
model's layer count; the analytic plan (`info --mesh`, no compile) at that count stands beside it.
Whole-model compiles take too long on a 2-core VM (a Gemma-2 layer at T = 32768: minutes), which
is why the line: every figure at the full depth is extrapolated unless the run compiled it.

  python3 bench/seed_runs.py run [RUN[:L] ...] # compile (default: every run, in the order below;
                                               # RUN:L one layer count, e.g. the full depth)
  python3 bench/seed_runs.py fit [--markdown]  # fit and extrapolate what has been compiled

Stdlib only. LMTRAIN (default build/lmtrain) is the binary; SEED_RUNS_RESULTS (default
bench/results/seeds-2026-11-29c, the compiles of docs/parallel.md after the vocabulary-parallel
loss head; seeds-2026-11-29b (after 7015f96), seeds-2026-11-29 and seeds-2026-11-28 hold the
earlier ones) the results directory.
"""
import json
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LMTRAIN = os.environ.get("LMTRAIN", os.path.join(ROOT, "build", "lmtrain"))
RESULTS = os.environ.get("SEED_RUNS_RESULTS",
                         os.path.join(ROOT, "bench", "results", "seeds-2026-11-29c"))
SCRATCH = os.environ.get("SEED_RUNS_SCRATCH", "/tmp/seed_runs")

# name: model config.json dir, full layer count, info's plan flags, target, the layer counts
# compiled. "bench" runs use a YAML config and --set instead (LoRA).
RUNS = {
    "gemma2-9b-v5p-16": dict(model="docs/examples/gemma-2-9b", seq=32768, batch=8,
                             mesh="fsdp=8", device="v5p", target="v5p-16", layers=[2, 3, 4]),
    "gemma2-9b-v4-16": dict(model="docs/examples/gemma-2-9b", seq=32768, batch=8,
                            mesh="fsdp=8", device="v4", target="v4-16", layers=[2, 3, 4]),
    "gemma3-270m-lora-v5e-8": dict(config="configs/examples/seeds-gemma3-270m-lora-v5e.yaml",
                                   target="v5e-8", layers=[18]),
    "llama-3.1-8b-h100x8": dict(model="docs/examples/llama-3.1-8b", seq=4096, batch=8,
                                mesh="fsdp=8", device="h100", target="h100x8", layers=[2, 3, 4]),
    "llama-3.1-70b-2xh100x8": dict(model="docs/examples/llama-3.1-70b", seq=4096, batch=16,
                                   mesh="fsdp=16", device="h100", target="2xh100x8",
                                   layers=[2, 3, 4]),
    "llama-3.1-70b-2xh100x8-tensor8": dict(model="docs/examples/llama-3.1-70b", seq=4096,
                                           batch=2, mesh="fsdp=2,tensor=8", device="h100",
                                           target="2xh100x8", layers=[2, 3, 4]),
    "llama-3.1-70b-4xh100x8-tensor8": dict(model="docs/examples/llama-3.1-70b", seq=4096,
                                           batch=4, mesh="fsdp=4,tensor=8", device="h100",
                                           target="4xh100x8", layers=[2, 3, 4]),
    # 4 layers: libtpu refuses the compile (temporaries over the chip's HBM), so 1, 2, 3
    "llama-600b-v4-32": dict(model="docs/examples/llama-600b", seq=4096, batch=2,
                             mesh="data=2,tensor=8", device="v4", target="v4-32",
                             layers=[1, 2, 3]),
    "llama-600b-v4-1152": dict(model="docs/examples/llama-600b", seq=4096, batch=144,
                               mesh="fsdp=144,tensor=8", device="v4", target="v4:8x12x12",
                               layers=[2, 3, 4]),
    "llama-3.1-70b-h100x8": dict(model="docs/examples/llama-3.1-70b", seq=4096, batch=8,
                                 mesh="fsdp=8", device="h100", target="h100x8", layers=[2, 3, 4]),
    "gemma2-9b-v5e-8": dict(model="docs/examples/gemma-2-9b", seq=32768, batch=8,
                            mesh="fsdp=8", device="v5e", target="v5e-8", layers=[2, 3, 4]),
}


def model_dir(run, layers):
    """A copy of the run's config.json with `layers` layers (the full count: the config itself)."""
    src = os.path.join(ROOT, run["model"])
    cfg = json.load(open(os.path.join(src, "config.json")))
    if layers is None or layers == cfg["num_hidden_layers"]:
        return src
    out = os.path.join(SCRATCH, f"{os.path.basename(src)}-L{layers}")
    os.makedirs(out, exist_ok=True)
    cfg["num_hidden_layers"] = layers
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return out


def info_cmd(run, layers, compile_it):
    cmd = [LMTRAIN, "info", "--model", model_dir(run, layers), "--seq-len", str(run["seq"]),
           "--micro-batch", str(run["batch"]), "--precision", "bf16",
           "--activation-checkpointing", "--mesh", run["mesh"], "--device", run["device"], "--json"]
    if compile_it:
        cmd += ["--pjrt", "--target", run["target"]]
    return cmd


def bench_cmd(run, layers):
    return [LMTRAIN, "bench", "--config", os.path.join(ROOT, run["config"]), "--target",
            run["target"], "--set", f"model.num_hidden_layers={layers}"]


def unlimited_stack():
    """lmtrain reads XLA's optimized HLO with std::regex, whose matcher recurses once a character:
    a whole model's entry computation header (every parameter's shape and sharding on one line)
    overflowed the 8 MiB stack (SIGSEGV in std::__detail::_Executor::_M_dfs, Gemma-2-9B's 42
    layers). The compile itself had finished."""
    resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def compile_one(name, layers):
    run = RUNS[name]
    out = os.path.join(RESULTS, f"{name}-L{layers}.json")
    if os.path.exists(out):
        return
    cmd = bench_cmd(run, layers) if "config" in run else info_cmd(run, layers, True)
    cmd = ["/usr/bin/time", "-v", "nice"] + cmd
    print(f"{time.strftime('%H:%M:%S')} {name} L{layers}: {' '.join(cmd[3:])}", flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, preexec_fn=unlimited_stack)
    rss = [l for l in p.stderr.splitlines() if "Maximum resident" in l]
    record = {"command": cmd[3:], "returncode": p.returncode, "wall_seconds": time.time() - t0,
              "max_rss": rss[-1].split(":")[-1].strip() + " kB" if rss else None}
    try:
        record["result"] = json.loads(p.stdout)
    except json.JSONDecodeError:
        record["stdout"] = p.stdout[-4000:]
        record["stderr"] = "\n".join(l for l in p.stderr.splitlines()
                                     if not l.startswith("\t"))[-4000:]
    os.makedirs(RESULTS, exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"  rc {p.returncode}, {record['wall_seconds']:.0f} s, {record['max_rss']}", flush=True)


# --- fit ------------------------------------------------------------------------------------

def xla_figures(record):
    """Per device: arguments, temporaries and per kind (count, sent bytes), from info or bench."""
    r = record.get("result")
    if r is None:
        return None
    step = r.get("pjrt_step") or r.get("pjrt")
    mem = step.get("step_memory", step)  # bench nests them, info does not
    f = {"arguments": mem["argument_bytes"], "temporaries": mem["temp_bytes"]}
    for kind, c in step["collectives"]["by_kind"].items():
        f[f"{kind} count"] = c["count"]
        f[f"{kind} sent"] = c["sent_bytes"]
    f["loops_without_trip_count"] = step["collectives"].get("loops_without_trip_count", 0)
    f["device_bytes"] = step["device_fit"]["allocator_bytes"]  # what the allocator hands out
    f["fits"] = step["device_fit"]["fits"]
    f["step_bytes"] = step["device_fit"]["step_bytes"]
    return f


def line(xs, ys):
    """Least squares y = a + b x; the largest residual relative to |y| (0 where y is 0)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    worst = max((abs(a + b * x - y) / abs(y) if y else abs(a + b * x)) for x, y in zip(xs, ys))
    return a, b, worst


def plan_figures(run):
    """The analytic plan at the model's own layer count (info --mesh, nothing compiled)."""
    p = subprocess.run(info_cmd(run, None, False), capture_output=True, text=True, cwd=ROOT)
    plan = json.loads(p.stdout)["mesh_plan"]
    kinds = {}
    for c in plan["collectives"]:
        kind = c["what"].split(" of ")[0]
        k = kinds.setdefault(kind, [0, 0])
        k[0] += c["count"]
        k[1] += c["bytes_per_device"]  # the key's whole, over its count
    pd = plan["per_device"]
    return {"arguments": pd["argument_bytes"], "temporaries": pd["temp_bytes"],
            "total": pd["total_bytes"], "collectives": kinds, "fits": plan.get("fits")}


def fit(markdown):
    rows = []
    for name, run in RUNS.items():
        records = {}
        full = (json.load(open(os.path.join(ROOT, run["model"], "config.json")))
                ["num_hidden_layers"] if "model" in run else max(run["layers"]))
        for L in sorted(set(run["layers"] + [full])):
            path = os.path.join(RESULTS, f"{name}-L{L}.json")
            if os.path.exists(path):
                records[L] = json.load(open(path))
        if not records:
            continue
        figs = {L: xla_figures(r) for L, r in records.items()}
        failed = {L: r for L, r in records.items() if figs[L] is None}
        for L, r in failed.items():
            print(f"{name} L{L}: failed, rc {r['returncode']}: {r.get('stderr', '')[-600:]}")
        figs = {L: f for L, f in figs.items() if f is not None}
        if not figs:
            continue
        print(f"\n## {name} ({run['target']}, {run.get('mesh', 'see config')}), "
              f"compiled at L = {sorted(figs)}, full depth {full}")
        keys = sorted({k for f in figs.values() for k in f
                       if k not in ("fits", "device_bytes")})
        xs = sorted(L for L in figs if L != full)
        out = {}
        for k in keys:
            ys = [figs[L].get(k, 0) for L in xs]
            line_at_full, worst, how = None, None, f"{len(xs)} points"
            if len(xs) >= 3:
                a, b, worst = line(xs, ys)
                line_at_full, how = a + b * full, f"a {a:.6g} + b {b:.6g} L"
            if full in figs:
                v = figs[full].get(k, 0)
                if line_at_full is not None:
                    how += f"; compiled at L={full}: {v}, the line " + (
                        f"{100 * (line_at_full - v) / v:+.3f}%" if v else f"{line_at_full:.6g}")
                out[k] = (v, worst, how)
            else:
                out[k] = (line_at_full, worst, how)
            w = "" if worst is None else f"  residual {100 * worst:.4f}%"
            print(f"  {k:28s} at L={xs}: {ys} -> L={full}: {line_at_full}  ({how}){w}")
        any_fig = next(iter(figs.values()))
        dev = any_fig["device_bytes"]
        if out.get("arguments", (None,))[0] is not None:
            tot = out["step_bytes"][0]  # arguments, temporaries, outputs not donated
            print(f"  XLA per device at L={full}: arguments {out['arguments'][0] / 2**30:.2f} GiB,"
                  f" temporaries {out['temporaries'][0] / 2**30:.2f} GiB, step "
                  f"{tot / 2**30:.2f} GiB of {dev / 2**30:.2f} GiB "
                  f"({'fits' if tot <= dev else f'over by {(tot - dev) / 2**30:.2f} GiB, x{tot / dev:.2f}'})")
        row, at_least = None, None
        if out.get("arguments", (None,))[0] is not None:
            def affine(k):  # compiled whole, or a line that holds (residual under 1%)
                return full in figs or out[k][1] < 0.01

            def gib(k):
                if full in figs:
                    return f"{out[k][0] / 2**30:.2f}"
                if not affine(k):
                    return f"not affine (residual {100 * out[k][1]:.1f}%)"
                return f"{out[k][0] / 2**30:.2f}*"  # extrapolated from the line
            tot = out["step_bytes"][0] if affine("step_bytes") else out["arguments"][0]
            kinds = sorted({k.rsplit(" ", 1)[0] for k in out if k.endswith(" count")})
            coll = "; ".join(f"{k} {out[k + ' count'][0]:.0f} / {out[k + ' sent'][0] / 1e9:.2f}"
                             for k in kinds if out[k + " count"][0])
            fits = ("fits" if tot <= dev else
                    f"over by {(tot - dev) / 2**30:.2f} GiB (x{tot / dev:.2f})")
            if not affine("step_bytes"):
                fits = ("arguments alone " if tot > dev else "arguments fit; ") + (
                    fits if tot > dev else "the step unknown")
            row = [name, run["target"], run.get("mesh", "data=8"), gib("arguments"),
                   gib("temporaries"), gib("step_bytes"), f"{dev / 2**30:.2f}", fits, coll]
            # The whole model's compile refused by the compiler for its memory: that, not the line.
            refused = re.search(r"HLO temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)",
                                failed[full].get("stderr", "")) if full in failed else None
            if refused:
                temps, hbm = float(refused.group(1)), float(refused.group(2))
                args = out["arguments"][0] / 2**30
                at_least = (args + temps) * 2**30
                row[4] = f"{full} layers: {temps:.2f} (the compiler's refusal)"
                row[5] = f"at least {args + temps:.2f} (arguments and the refusal's temporaries)"
                row[7] = (f"no: the compiler refuses the compile, temporaries alone {temps:.2f} GiB "
                          f"of {hbm:.2f}; the step over by at least {args + temps - dev / 2**30:.2f} GiB")
        if "model" in run:
            p = plan_figures(run)
            print(f"  plan at L={full}: arguments {p['arguments'] / 2**30:.2f} GiB, temporaries "
                  f"{p['temporaries'] / 2**30:.2f} GiB, total {p['total'] / 2**30:.2f} GiB")
            if out.get("arguments", (None,))[0] is not None:
                tot = out["step_bytes"][0]
                print(f"  plan vs XLA total: {100 * (p['total'] - tot) / tot:+.1f}%")
            for kind, (n, b) in p["collectives"].items():
                print(f"  plan {kind}: {n} x, {b / 1e6:.1f} MB sent a device")
            if row:
                err = (f"{100 * (p['total'] - at_least) / at_least:+.1f}% or lower" if at_least else
                       f"{100 * (p['total'] - out['step_bytes'][0]) / out['step_bytes'][0]:+.1f}%"
                       if affine("step_bytes") else
                       f"arguments {100 * (p['arguments'] - out['arguments'][0]) / out['arguments'][0]:+.3f}%")
                row += [f"{p['total'] / 2**30:.2f}", err,
                        "; ".join(f"{k} {n} / {b / 1e9:.2f}" for k, (n, b) in p["collectives"].items())]
        elif row:
            row += ["no plan (LoRA)", "", ""]
        if row:
            rows.append(row)
    if markdown:
        print("\n| run | target | mesh | arguments | temporaries | step | limit | fits |"
              " collectives, XLA (count / GB sent a device) | plan | plan's error |"
              " collectives, plan |")
        print("|" + "---|" * 12)
        for r in rows:
            print("| " + " | ".join(r) + " |")


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "fit"):
        sys.exit(__doc__)
    if sys.argv[1] == "fit":
        fit("--markdown" in sys.argv)
        return
    # RUN compiles its layer counts; RUN:L one of them (or the full depth)
    for item in sys.argv[2:] or list(RUNS):
        name, _, L = item.partition(":")
        for layers in ([int(L)] if L else RUNS[name]["layers"]):
            compile_one(name, layers)


if __name__ == "__main__":
    main()
