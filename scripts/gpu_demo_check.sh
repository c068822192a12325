#!/usr/bin/env bash
# The demo on an accelerator through PJRT, as a check of what the step computes there: the demo's
# first GPU_DEMO_STEPS (200) steps in f32 and in bf16 (the bf16 run's final loss within 2% of
# f32's, no logged step more than 5% apart), then train.deterministic: a run of 2N steps
# (GPU_DEMO_RESUME_STEPS, N = 30) saving at step N, and a copy of it resumed from that checkpoint,
# whose losses must repeat the first run's exactly. Prints one line per run and a verdict; writes
# the runs under OUTDIR.
#   scripts/gpu_demo_check.sh LMTRAIN_BINARY PJRT_PLUGIN OUTDIR
# The demo's corpus (Debian's fortunes, /usr/share/games/fortunes) must be there.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 LMTRAIN_BINARY PJRT_PLUGIN OUTDIR" >&2; exit 2; }
bin=$1 plugin=$2 dir=$3
config=$(cd "$(dirname "$0")/.." && pwd)/configs/demo.yaml
steps=${GPU_DEMO_STEPS:-200}
half=${GPU_DEMO_RESUME_STEPS:-30}
mkdir -p "$dir"
common=(--set "data.tokenizer=$dir/tokenizer.json" --set "data.store=$dir/store"
        --set train.log_every=1 --set train.sample_tokens=0 --set train.eval_every=100000
        --set train.backend=pjrt --set "train.pjrt_plugin=$plugin")
if [ ! -f "$dir/store/manifest.json" ]; then
  "$bin" tokenizer train --config "$config" "${common[@]}" --vocab-size 2048 \
    --out "$dir/tokenizer.json" > "$dir/prepare.log" 2>&1 &&
    "$bin" prepare --quiet --config "$config" "${common[@]}" >> "$dir/prepare.log" 2>&1 ||
    { tail -5 "$dir/prepare.log"; exit 1; }
fi

run() {  # $1: name; the rest: --set arguments
  local name=$1
  shift
  local t0=$SECONDS
  "$bin" train --config "$config" "${common[@]}" --set "train.out_dir=$dir/$name" "$@" \
    > "$dir/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s: $(grep -v '^\s*$' "$dir/$name.log" | tail -1)"
  return $rc
}
rm -rf "$dir"/f32 "$dir"/bf16 "$dir"/det "$dir"/det_resumed
once=(--set "train.max_steps=$steps" --set train.save_every=100000)
run f32 "${once[@]}"
run bf16 "${once[@]}" --set train.precision=bf16
det=(--set train.deterministic=true --set train.precision=bf16 --set "train.max_steps=$((2 * half))"
     --set "train.save_every=$half" --set train.keep_last=4)
if run det "${det[@]}"; then
  cp -r "$dir/det" "$dir/det_resumed"
  # The copy keeps the metrics of the steps before its checkpoint only, as a run killed there.
  python3 -c 'import json, sys
p = sys.argv[1] + "/metrics.jsonl"
keep = [l for l in open(p) if json.loads(l).get("step", 0) <= int(sys.argv[2])]
open(p, "w").writelines(keep)' "$dir/det_resumed" "$half"
  ckpt=$(printf 'step_%07d' "$half")
  "$bin" train --config "$config" "${common[@]}" --set "train.out_dir=$dir/det_resumed" \
    "${det[@]}" --resume "$ckpt" > "$dir/det_resumed.log" 2>&1
  echo "det_resumed (from $ckpt): exit $?"
fi

python3 - "$dir" "$half" <<'PY'
import json, os, sys
d, half = sys.argv[1], int(sys.argv[2])
def losses(name):  # step -> loss, the last line of each step (a resumed run appends)
    p = os.path.join(d, name, "metrics.jsonl")
    out = {}
    if os.path.exists(p):
        for line in open(p):
            j = json.loads(line)
            if "loss" in j and "step" in j and "val_loss" not in j:
                out[j["step"]] = j["loss"]
    return out
f32, bf16 = losses("f32"), losses("bf16")
ok = True
if f32 and bf16 and max(f32) == max(bf16):
    last = max(f32)
    final = abs(bf16[last] - f32[last]) / f32[last]
    worst = max(abs(bf16[s] - f32[s]) / f32[s] for s in f32 if s in bf16)
    print(f"f32 final loss {f32[last]:.4f}, bf16 {bf16[last]:.4f} at step {last}: final "
          f"{final:.2%} apart (at most 2%), worst logged step {worst:.2%} (at most 5%)")
    ok = final <= 0.02 and worst <= 0.05
else:
    print("f32 / bf16: no complete pair of runs")
    ok = False
det, res = losses("det"), losses("det_resumed")
steps = [s for s in det if s > half]
if steps and all(s in res for s in steps):
    diff = max(abs(res[s] - det[s]) for s in steps)
    print(f"deterministic resume from step {half}: steps {min(steps)}..{max(steps)} "
          f"{'repeat exactly' if diff == 0 else f'differ by up to {diff:.3g}'}")
    ok = ok and diff == 0
else:
    print("deterministic resume: no complete pair of runs")
    ok = False
print("demo check:", "passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
