#!/usr/bin/env bash
# The demo as the README runs it (tokenizer train, prepare, train with configs/demo.yaml) into
# DIR, once: the ctest fixture `demo_run` for the tests that read the run (what it learns, pjrt
# tracking its losses, LoRA SFT on its last checkpoint; tests/demo_run.h). Every step's loss is
# logged (train.log_every=1 changes only what is written) and no sample is drawn.
#   tests/run_demo.sh LMTRAIN_BINARY DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 LMTRAIN_BINARY DIR" >&2; exit 2; }
bin=$1
dir=$2
config=$(cd "$(dirname "$0")/.." && pwd)/configs/demo.yaml
rm -rf "$dir"
mkdir -p "$dir"
sets=(--set "train.out_dir=$dir/run" --set "data.tokenizer=$dir/tokenizer.json"
      --set "data.store=$dir/store" --set train.log_every=1 --set train.sample_tokens=0)
"$bin" tokenizer train --config "$config" "${sets[@]}" --vocab-size 2048 --out "$dir/tokenizer.json"
"$bin" prepare --quiet --config "$config" "${sets[@]}"
if ! "$bin" train --config "$config" "${sets[@]}" > "$dir/train.out"; then
  tail -n 20 "$dir/train.out"
  exit 1
fi
tail -n 3 "$dir/train.out"
touch "$dir/complete"
