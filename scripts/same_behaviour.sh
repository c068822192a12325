#!/usr/bin/env bash
# Checks that two builds of lmtrain behave the same, for a change meant to move code without
# changing what it computes (a reorganisation): run on one machine, in one sitting.
#   scripts/same_behaviour.sh OLD_BUILD NEW_BUILD WORK_DIR [--quick]
# OLD_BUILD and NEW_BUILD are build directories (lmtrain and the test plugin
# liblmt_test_pjrt_plugin.so inside). It compares, and fails on the first difference:
#   1. the demo's tokenizer and token store, each build preparing its own from the same text;
#   2. the demo trained 60 steps with train.log_every=1 (an evaluation every 20 steps, a checkpoint
#      every 30) on the CPU backend and on XLA's CPU plugin: metrics.jsonl without the wall-clock
#      and memory fields (losses, gradient norms, learning rates, evaluations: bit for bit),
#      config.yaml, and every checkpoint's files (weights, optimizer state, state.json with the
#      config hash);
#   3. every StableHLO program and its compile options as the pjrt backend sends them to a plugin
#      (recorded by the test plugin), for a few steps, an evaluation and a checkpoint of each
#      variant below: families, precisions, LoRA, checkpointing, the losses, the optimizers and a
#      mesh of 4 devices.
# --quick skips part 2's pjrt run. Exit 0 when all is the same.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD WORK_DIR [--quick]" >&2; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
work=$3
quick=${4:-}
root=$(cd "$(dirname "$0")/.." && pwd)
config=$root/configs/demo.yaml
for b in "$old" "$new"; do
  for f in lmtrain liblmt_test_pjrt_plugin.so; do
    [ -e "$b/$f" ] || { echo "$b/$f is missing (build the lmtrain and lmt_test_pjrt_plugin targets)" >&2; exit 2; }
  done
done
rm -rf "$work"
mkdir -p "$work"
fail() { echo "DIFFERENT: $*" >&2; exit 1; }
same_file() { cmp -s "$1" "$2" || fail "$1 and $2"; }
same_tree() {  # every file of two directories, by relative path
  local a=$1 b=$2
  diff <(cd "$a" && find . -type f | sort) <(cd "$b" && find . -type f | sort) > /dev/null ||
    fail "the files of $a and $b"
  while read -r f; do same_file "$a/$f" "$b/$f"; done < <(cd "$a" && find . -type f | sort)
}
# metrics.jsonl without what depends on the clock or the machine's memory.
steady_metrics() {
  python3 -c '
import json, sys
drop = {"tokens_per_s", "step_ms", "mfu", "eta_s", "rss_bytes", "rss_peak_bytes",
        "device_bytes_in_use", "device_peak_bytes", "time", "wall_s"}
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(json.dumps({k: v for k, v in j.items() if k not in drop}, sort_keys=True))
' "$1"
}

# ---- 1. data ----
data=$work/data
mkdir -p "$data"
for side in old new; do
  bin=${!side}/lmtrain
  sets=(--set "data.tokenizer=$data/$side.tokenizer.json" --set "data.store=$data/$side.store")
  "$bin" tokenizer train --config "$config" "${sets[@]}" --vocab-size 2048 \
    --out "$data/$side.tokenizer.json" > /dev/null
  "$bin" prepare --quiet --config "$config" "${sets[@]}" > /dev/null
done
same_file "$data/old.tokenizer.json" "$data/new.tokenizer.json"
diff <(cd "$data/old.store" && ls) <(cd "$data/new.store" && ls) > /dev/null || fail "store files"
for f in "$data"/old.store/*; do
  name=$(basename "$f")
  case $name in manifest.json|checksums*) continue ;; esac  # they name the store's own path
  same_file "$f" "$data/new.store/$name"
done
echo "same: tokenizer and token store"

base=(--config "$config" --set "data.tokenizer=$data/old.tokenizer.json"
      --set "data.store=$data/old.store" --set train.sample_tokens=0)

# ---- 2. the demo's first 60 steps ----
backends=(cpu pjrt)
[ "$quick" = --quick ] && backends=(cpu)
for backend in "${backends[@]}"; do
  for side in old new; do  # one out_dir for both: it is a key of the config and its hash
    "${!side}/lmtrain" train "${base[@]}" --set "train.out_dir=$work/run" \
      --set train.backend=$backend --set train.max_steps=60 --set train.log_every=1 \
      --set train.eval_every=20 --set train.save_every=30 --set train.keep_last=0 \
      > "$work/run.$backend.$side.out"
    mv "$work/run" "$work/run.$backend.$side"
  done
  a=$work/run.$backend.old b=$work/run.$backend.new
  diff <(steady_metrics "$a/metrics.jsonl") <(steady_metrics "$b/metrics.jsonl") > /dev/null ||
    fail "$a/metrics.jsonl and $b/metrics.jsonl"
  same_file "$a/config.yaml" "$b/config.yaml"
  same_tree "$a/checkpoints" "$b/checkpoints"
  echo "same: $backend, 60 steps (metrics.jsonl, config.yaml, checkpoints)"
done

# ---- 3. the programs sent to a plugin ----
gemma=(--set model.head_dim=32)
variants=(
  "f32|"
  "bf16|--set train.precision=bf16"
  "checkpointed-cut|--set train.activation_checkpointing=true --set loss.impl=cut --set loss.vocab_tile=512 --set train.loss_chunk_tokens=512"
  "losses-lion|--set loss.name=focal --set loss.label_smoothing=0.1 --set loss.z_loss=1e-4 --set optimizer.name=lion"
  "muon-accum|--set optimizer.name=muon --set train.grad_accum_steps=2 --set train.document_masking=true"
  "sgd-bf16|--set optimizer.name=sgd --set train.precision=bf16 --set train.activation_checkpointing=true"
  "lora|--set lora.rank=4 --set lora.dropout=0.1 --set lora.modules_to_save=[norm]"
  "lora-bf16|--set lora.rank=4 --set train.precision=bf16"
  "mesh|--set parallel.fsdp=2 --set parallel.tensor=2 --set train.precision=bf16"
  "qwen3|--set model.family=qwen3 --set model.head_dim=32"
  "gemma2|--set model.family=gemma2 ${gemma[*]} --set model.sliding_window=64"
  "gemma3|--set model.family=gemma3 ${gemma[*]} --set model.sliding_window=64"
  "gpt2|--set model.family=gpt2 --set model.num_key_value_heads=6 --set model.hidden_act=relu --set train.activation_bits=1"
)
for v in "${variants[@]}"; do
  name=${v%%|*}
  read -r -a extra <<< "${v#*|}"
  for side in old new; do
    rec=$work/hlo.$name.$side
    mkdir -p "$rec"
    LMT_TEST_PLUGIN_RECORD=$rec "${!side}/lmtrain" train "${base[@]}" "${extra[@]}" \
      --set "train.out_dir=$work/hlo_run" --set train.backend=pjrt \
      --set "train.pjrt_plugin=${!side}/liblmt_test_pjrt_plugin.so" --set train.max_steps=3 \
      --set train.eval_every=2 --set train.eval_steps=1 --set train.save_every=2 \
      --set train.log_every=1 --set train.micro_batch_size=4 --set train.peak_tflops=1 \
      > "$work/hlo.$name.$side.out" 2>&1 || { cat "$work/hlo.$name.$side.out"; fail "$name ($side) did not run"; }
    rm -rf "$work/hlo_run"
  done
  same_tree "$work/hlo.$name.old" "$work/hlo.$name.new"
  echo "same: $name ($(ls "$work/hlo.$name.new" | grep -c mlir) programs)"
done
echo "the two builds behave the same"
