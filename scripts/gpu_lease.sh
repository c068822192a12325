#!/usr/bin/env bash
# One call on a GPU lent for a few minutes, with lmtrain built elsewhere: the demo check
# (scripts/gpu_demo_check.sh), then lmtrain beside JAX with cuDNN attention on GPT-2 124M B16
# T1024, the 1B at T32768 (checkpointed) and at T2048 (scripts/gpu_check.sh, one round, XLA's
# dumps of lmtrain's programs kept), then torch.compile on GPT-2 if time is left. Everything
# stops by DEADLINE_S; what was done so far is packed into $OUT/results.tgz after each part.
#   scripts/gpu_lease.sh PACK DEADLINE_S
# PACK (made by scripts/gpu_pack.sh): lmtrain, lib/ (its shared libraries) and fortunes/ (the
# demo's corpus, installed at /usr/share/games/fortunes if that is missing).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 PACK DEADLINE_S" >&2; exit 2; }
pack=$1 deadline=$2
out=${OUT:-/tmp/gpu_lease_out}
w=/tmp/gpu_lease
. scripts/gpu_common.sh
save() {  # the logs and the largest program's XLA dumps of each shape, gzipped, in one file
  local d f
  mkdir -p "$w/logs/xla"
  for d in "$w"/logs/peers/xla_*; do
    [ -d "$d" ] || continue
    f=$(ls -S "$d"/*after_optimizations.txt 2>/dev/null | head -1)
    [ -n "$f" ] || continue
    f=${f%.txt}
    for g in "$f.txt" "$f-buffer-assignment.txt" "$f-memory-usage-report.txt"; do
      [ -f "$g" ] && gzip -c "$g" > "$w/logs/xla/$(basename "$d")_$(basename "$g").gz"
    done
  done
  tar czf "$out/results.tgz" -C "$w" --exclude='logs/peers/xla_*' --exclude='*.safetensors' \
    --exclude='*/store' logs
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$bin" --version || { ldd "$bin" | grep "not found"; exit 1; }
echo "CUDA PJRT plugin: ${plugin:-none}; jax $(python3 -c 'import jax; print(jax.__version__)')"

echo "== demo check ($(left) s left)"
timeout "$(cap 170)" scripts/gpu_demo_check.sh "$bin" "$plugin" "$w/logs/demo" \
  2>&1 | tee "$w/logs/demo.txt"
save

echo "== lmtrain beside JAX (cuDNN attention) ($(left) s left)"
OUT=$w/logs/peers GPU_CHECK_PEERS_ONLY=1 LMTRAIN=$bin GPU_CHECK_SHAPES="0 2 1" \
  GPU_CHECK_RUNNERS="lmtrain jax-cudnn" GPU_CHECK_ROUNDS=1 GPU_CHECK_DUMP=1 \
  GPU_CHECK_RUN_TIMEOUT_S=${GPU_LEASE_RUN_TIMEOUT_S:-150} GPU_CHECK_DEADLINE_S=$(($(left) - 10)) \
  scripts/gpu_check.sh 2>&1 | tee "$w/logs/peers.txt"
save

if (($(left) > 110)); then
  echo "== torch.compile on GPT-2 ($(left) s left)"
  OUT=$w/logs/torch GPU_CHECK_PEERS_ONLY=1 LMTRAIN=$bin GPU_CHECK_SHAPES="0" \
    GPU_CHECK_RUNNERS="torch-compile" GPU_CHECK_ROUNDS=1 GPU_CHECK_DEADLINE_S=$(($(left) - 10)) \
    scripts/gpu_check.sh 2>&1 | tee "$w/logs/torch.txt"
  save
fi
echo "== done, $(left) s left"
