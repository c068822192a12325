#!/usr/bin/env bash
# Makes tests/data/saved_runs: runs that an earlier lmtrain saved, which the current one must load
# to the same config (YAML and hash) and resume to the same losses (tests/train/test_saved_runs.cpp).
#   scripts/make_saved_runs.sh LMTRAIN OUT_DIR
# LMTRAIN is the earlier build's binary. Never regenerate the fixture with the build under test:
# it holds what an earlier build wrote. Six tiny runs (a llama of hidden size 8 on byte tokens),
# 4 steps each with checkpoints at 2 and 4, of which the fixture keeps step 2, the metrics of all 4
# steps and config.yaml: one per optimizer, LoRA with modules_to_save, and the loss and parallel
# keys set. Beside them the config.yaml and config hash of configs/demo.yaml and
# configs/sft-lora.yaml (their --set arguments in config.yaml's comments), from one step each.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 LMTRAIN OUT_DIR" >&2; exit 2; }
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$2"
mkdir -p "$2"
cd "$2"

words=(the cat sat on a mat and then ran far away from home at night)
for d in $(seq 0 39); do
  [ "$d" -gt 0 ] && echo "%"
  line=""
  for w in $(seq 0 11); do line+="${words[$(( (d * 7 + w * 3) % 15 ))]} "; done
  echo "${line% }"
done > docs.txt

config() {  # NAME, then YAML lines added at the end
  local name=$1
  shift
  {
    cat <<EOF
model:
  family: llama
  vocab_size: 257
  hidden_size: 8
  intermediate_size: 16
  num_hidden_layers: 1
  num_attention_heads: 2
  num_key_value_heads: 1
  max_position_embeddings: 64
  tie_word_embeddings: true
data:
  sources:
    - path: docs.txt
  tokenizer: bytes
  store: store
  seq_len: 16
  val_fraction: 0.1
train:
  micro_batch_size: 2
  max_steps: 4
  lr: 0.05
  min_lr: 0.005
  warmup_steps: 1
  weight_decay: 0.1
  eval_every: 0
  save_every: 2
  keep_last: 0
  log_every: 1
  threads: 1
  out_dir: runs/$name
logging:
  console: false
EOF
    printf '%s\n' "$@"
  } > "$name.yaml"
}
config adamw "optimizer:" "  name: adamw"
config lion "optimizer:" "  name: lion"
config sgd "optimizer:" "  name: sgd"
config muon "optimizer:" "  name: muon" "  ns_steps: 4"
config lora "lora:" "  rank: 2" "  alpha: 4" "  target_modules: [q_proj, v_proj, down_proj]" \
  "  use_rslora: true" "  modules_to_save: [norm]"
config loss_parallel "loss:" "  name: focal" "  focal_gamma: 1.5" "  label_smoothing: 0.1" \
  "  z_loss: 0.0001" "  impl: cut" "  vocab_tile: 64" "parallel:" "  data: 1" \
  "  coordination_dir: coord" "  coordination_timeout: 30"

"$bin" prepare --quiet --config adamw.yaml > /dev/null
for name in adamw lion sgd muon lora loss_parallel; do
  "$bin" train --config "$name.yaml" > /dev/null
  rm -rf "runs/$name/checkpoints/step_0000004" "runs/$name/tb" "runs/$name/.lock"
done

# configs/demo.yaml and configs/sft-lora.yaml: one step each, for config.yaml and the hash.
one_step() {  # NAME CONFIG --set arguments...
  local name=$1 config=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  "$bin" train --config "$config" "${sets[@]}" > /dev/null
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["config_hash"])' \
    "runs/$name/checkpoints/step_0000001/state.json" > "runs/$name.hash"
  mv "runs/$name/config.yaml" "runs/$name.config.yaml"
  rm -rf "runs/$name"
}
ln -s "$root/configs" configs
one_step demo configs/demo.yaml data.tokenizer=bytes data.store=store data.seq_len=16 \
  train.max_steps=1 \
  train.out_dir=runs/demo train.sample_tokens=0 logging.console=false
one_step sft-lora configs/sft-lora.yaml train.init_from=runs/adamw/checkpoints/step_0000002 \
  data.store=store data.seq_len=16 train.max_steps=1 train.out_dir=runs/sft-lora \
  logging.console=false
rm configs
