#!/usr/bin/env bash
# One call on a lent GPU after scripts/gpu_lease.sh: the demo check again (deterministic resume
# included), the cost of train.deterministic on GPT-2 124M B16 T1024 bf16, and a per-kernel time of
# that step under Nsight Compute (one metric, gpu__time_duration, so no kernel is replayed), with
# XLA's autotuning results kept from a first run so that the profiled run launches few kernels
# while compiling. Results packed into $OUT/profile.tgz.
#   scripts/gpu_profile.sh PACK DEADLINE_S
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 PACK DEADLINE_S" >&2; exit 2; }
pack=$1 deadline=$2
out=${OUT:-/tmp/gpu_profile_out}
w=/tmp/gpu_profile
. scripts/gpu_common.sh
save() { tar czf "$out/profile.tgz" -C "$w" --exclude='*.safetensors' --exclude='*/store' logs; }
command -v ncu nsys | tr '\n' ' '; echo

echo "== demo check ($(left) s left)"
timeout "$(cap 100)" scripts/gpu_demo_check.sh "$bin" "$plugin" "$w/logs/demo" 2>&1 | tee "$w/logs/demo.txt"
save

gpt2=(bench --config configs/bench/gpt2-124m.yaml --set train.backend=pjrt
      --set "train.pjrt_plugin=$plugin" --set train.precision=bf16)
brief() { grep '^{' | python3 -c 'import json, sys
j = json.loads(sys.stdin.read()); p = j.get("pjrt", {})
print("%.0f tokens/s, step %.1f ms, attention %s, device peak %s" % (j["tokens_per_s"],
      j["step_ms"], p.get("attention"), p.get("device_peak_bytes")))'; }
echo "== GPT-2 bf16, default and deterministic ($(left) s left)"
export XLA_FLAGS="--xla_gpu_per_fusion_autotune_cache_dir=$w/autotune"
for det in false true false true; do
  echo -n "deterministic=$det: "
  timeout "$(cap 60)" "$bin" "${gpt2[@]}" --steps 10 --set "train.deterministic=$det" \
    > "$w/logs/gpt2_det_$det.log" 2>&1 && brief < "$w/logs/gpt2_det_$det.log" || echo "failed"
done
save

echo "== ncu, one GPT-2 step ($(left) s left)"
timeout "$(cap 200)" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
  --csv --print-units base "$bin" "${gpt2[@]}" --steps 1 > "$w/logs/ncu_gpt2.csv" 2> "$w/logs/ncu_gpt2.err"
echo "ncu exit $?, $(wc -l < "$w/logs/ncu_gpt2.csv") lines"
tail -3 "$w/logs/ncu_gpt2.err"
gzip -f "$w/logs/ncu_gpt2.csv"
save
echo "== done, $(left) s left"
