#!/usr/bin/env bash
# The demo as the README runs it (tokenizer train, prepare, train with configs/demo.yaml) into
# DIR, once: the ctest fixture `demo_run` for the tests that read the run (what it learns, pjrt
# tracking its losses, LoRA SFT on its last checkpoint; tests/demo_run.h). Every step's loss is
# logged (train.log_every=1 changes only what is written) and no sample is drawn. At each
# evaluation the run also scores a task made here from the demo's own data (eval.tasks): a
# fortune's first three words, then its rest in order or three shuffles of its words, the task
# being to prefer the real order (lm-evaluation-harness's multiple-choice form; chance 1/4).
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
mkdir -p "$dir/task"
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort |
  xargs cat | awk -v seed=1234 '
BEGIN { RS = "\n%\n"; srand(seed); kept = 0 }
{
  gsub(/[\t\n]/, " "); gsub(/  +/, " "); sub(/^ /, ""); sub(/ $/, "")
  # printable ASCII without quotes or backslashes: written into JSON as it is
  if (kept == 200 || $0 ~ /[^ -~]/ || $0 ~ /["\\]/) next
  n = split($0, w, " ")
  if (n < 10 || n > 24 || NR % 5 != 0) next
  real = w[4]; for (i = 5; i <= n; i++) real = real " " w[i]
  m = n - 3
  label = int(rand() * 4)
  line = "{\"context\": \"" w[1] " " w[2] " " w[3] "\", \"choices\": ["
  for (c = 0; c < 4; c++) {
    s = real
    for (tries = 0; c != label && s == real && tries < 20; tries++) {
      for (i = 1; i <= m; i++) p[i] = w[i + 3]
      for (i = m; i > 1; i--) { j = int(rand() * i) + 1; t = p[i]; p[i] = p[j]; p[j] = t }
      s = p[1]; for (i = 2; i <= m; i++) s = s " " p[i]
    }
    line = line (c ? ", " : "") "\"" s "\""
  }
  print line "], \"label\": " label "}"
  kept++
}' > "$dir/task/word_order.jsonl"
cat > "$dir/task/word_order.yaml" <<TASK
task: demo_word_order
dataset_path: json
dataset_kwargs:
  data_files:
    test: $dir/task/word_order.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{context}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
  - metric: acc_norm
TASK
sets+=(--set "eval.tasks=[$dir/task/word_order.yaml]" --set eval.limit=100)
"$bin" tokenizer train --config "$config" "${sets[@]}" --vocab-size 2048 --out "$dir/tokenizer.json"
"$bin" prepare --quiet --config "$config" "${sets[@]}"
if ! "$bin" train --config "$config" "${sets[@]}" > "$dir/train.out"; then
  tail -n 20 "$dir/train.out"
  exit 1
fi
tail -n 3 "$dir/train.out"
touch "$dir/complete"
