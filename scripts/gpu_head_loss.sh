#!/usr/bin/env bash
# One call on a lent GPU for the loss head's entry in docs/performance.md: `lmtrain bench
# --head-loss` (the output head and its loss alone, forward and backward, pjrt on the CUDA plugin,
# bf16) on Llama-3.2-1B's head (vocab 128256, hidden 2048) at 4K, 32K and 128K tokens, cut, chunked
# and full logits (where the full loss does not fit, its compiled memory instead); PyTorch's plain
# loss (bench/torch_head_loss_bench.py) on the same shapes; then the 1B training step at T32768
# with each loss implementation if time is left. One JSON line a run in $OUT/head_loss.jsonl.
#   scripts/gpu_head_loss.sh PACK DEADLINE_S      (PACK: scripts/gpu_pack.sh's)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 PACK DEADLINE_S" >&2; exit 2; }
pack=$1 deadline=$2
out=${OUT:-/tmp/gpu_head_loss_out}
w=/tmp/gpu_head_loss
. scripts/gpu_common.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$bin" --version || { ldd "$bin" | grep "not found"; exit 1; }
log=$out/head_loss.jsonl
cfg=configs/bench/llama-1b.yaml
pjrt=(--set train.backend=pjrt --set "train.pjrt_plugin=$plugin" --set train.precision=bf16
      --set train.micro_batch_size=1)
lmt() {  # tokens, then bench's arguments
  local T=$1; shift
  (($(left) > 25)) || { echo "skipped (time): T $T $*"; return; }
  local r
  r=$(timeout "$(cap 100)" "$bin" bench --config $cfg "${pjrt[@]}" --set data.seq_len="$T" "$@" \
      2> "$w/err") || r="{\"error\": $(tail -c 400 "$w/err" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'), \"tokens\": $T, \"args\": \"$*\"}"
  echo "$r" | tee -a "$log"
}
for T in 4096 32768 131072; do
  lmt $T --head-loss cut --steps 5
  lmt $T --head-loss chunked --steps 5
done
for T in 4096 32768; do lmt $T --head-loss full --steps 5; done
lmt 131072 --head-loss full --steps 2
lmt 131072 --head-loss full --compile-only
for T in 4096 32768 131072; do
  (($(left) > 25)) || break
  timeout "$(cap 60)" python3 bench/torch_head_loss_bench.py --tokens $T 2>&1 | tail -1 | tee -a "$log"
done
for impl in cut chunked; do
  lmt 32768 --set train.activation_checkpointing=true --set loss.impl=$impl --steps 3
done
echo "== done, $(left) s left"
