#!/usr/bin/env bash
# One call on a lent GPU: every kernel of a few training steps, timed on the GPU by the CUPTI
# tracer (bench/kernel_trace.cpp), for lmtrain and for its JAX peer (cuDNN attention) on GPT-2 124M
# B16 T1024 and the 1B shape at B4 T2048, bf16, then torch.compile on GPT-2 if time is left.
# bench/kernel_trace.py reads the traces. Results packed into $OUT/trace.tgz after each run.
#   scripts/gpu_trace.sh PACK DEADLINE_S
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 PACK DEADLINE_S" >&2; exit 2; }
pack=$1 deadline=$2
out=${OUT:-/tmp/gpu_trace_out}
w=/tmp/gpu_trace
. scripts/gpu_common.sh
tracer=$w/lib/liblmtrain_kernel_trace.so
[ -f "$tracer" ] || { echo "no tracer in $pack"; exit 1; }
save() { tar czf "$out/trace.tgz" -C "$w" logs; }

traced() {  # $1: name, $2: seconds at most; the rest: the command
  local name=$1 limit
  limit=$(cap "$2")
  shift 2
  local t0=$SECONDS
  mkdir -p "$w/raw/$name"
  CUDA_INJECTION64_PATH=$tracer KERNEL_TRACE_OUT=$w/raw/$name/%p.csv timeout "$limit" "$@" \
    > "$w/logs/$name.log" 2>&1
  local rc=$?
  # The process that ran the most kernels (torch.compile's workers use CUDA too).
  cp "$(wc -l "$w/raw/$name"/*.csv 2>/dev/null | sort -n | grep -v ' total$' | tail -1 | awk '{print $2}')" \
    "$w/logs/$name.csv" 2>/dev/null || echo "start_ns,end_ns,stream,name" > "$w/logs/$name.csv"
  echo "$name: exit $rc in $((SECONDS - t0)) s, $(($(wc -l < "$w/logs/$name.csv") - 1)) kernels;" \
    "$(grep -o '"tokens_per_s": *[0-9.]*' "$w/logs/$name.log" | tail -1)"
  grep -i "kernel_trace\|error" "$w/logs/$name.log" | head -3
  gzip -f "$w/logs/$name.csv"
  save
}
lm() { echo "$bin" bench --config "$1" --steps 3 --set train.backend=pjrt \
  --set "train.pjrt_plugin=$plugin" --set train.precision=bf16; }
jx() { echo python3 bench/jax_train_bench.py --config "$1" --steps 2 --precision bf16 \
  --attention cudnn; }
g=configs/bench/gpt2-124m.yaml l=configs/bench/llama-1b.yaml
traced lmtrain_gpt2 60 $(lm $g)
traced jax_gpt2 70 $(jx $g)
traced lmtrain_llama1b 70 $(lm $l)
traced jax_llama1b 70 $(jx $l)
if (($(left) > 70)); then
  traced torch_gpt2 90 python3 bench/torch_train_bench.py --config $g --steps 3 --precision bf16 \
    --compile --device cuda
fi
echo "== done, $(left) s left"
