#!/usr/bin/env bash
# Makes what scripts/check_export.py checks. For every family that `lmtrain init` can make in this
# build: a tiny model is initialised (with a tokenizer, and weights large enough that soft-capping
# and the sliding window matter), then exported with `lmtrain export` as f32 and as bf16, sharded;
# beside the exports go the token ids of a test sentence (`lmtrain tokenize --add-special`) and
# `lmtrain logits` of those ids for each export. Builds nothing and needs no Python: run it where
# lmtrain is built, copy OUT_DIR to a machine with torch + transformers and run
# scripts/check_export.py OUT_DIR there.
#   scripts/make_export_check.sh [OUT_DIR]      (default export_check; LMTRAIN=path/to/lmtrain)
set -euo pipefail
cd "$(dirname "$0")/.."
LMTRAIN=${LMTRAIN:-build/lmtrain}
[ -x "$LMTRAIN" ] || LMTRAIN=build-cpu/lmtrain
[ -x "$LMTRAIN" ] || { echo "no lmtrain binary (build it, or set LMTRAIN)" >&2; exit 2; }
OUT=${1:-export_check}
TOKS=tests/data/tokenizers
TEXT="The quick brown fox jumps over the lazy dog. Models trained here load in transformers."
SHAPE=(--set model.hidden_size=64 --set model.intermediate_size=96 --set model.num_hidden_layers=6
       --set model.num_attention_heads=4 --set model.head_dim=16 --set model.max_position_embeddings=128
       --set model.initializer_range=0.1)

rm -rf "$OUT"
mkdir -p "$OUT"
printf '%s' "$TEXT" > "$OUT/text.txt"
made=0
for family in llama mistral qwen2 qwen3 gemma gemma2 gemma3 gpt2; do
  dir="$OUT/$family"
  mkdir -p "$dir"
  # SentencePiece for the families that ship one, a tokenizer.json for the others.
  case $family in
    llama | gemma*) tok=$TOKS/sp_bpe.model ;;
    *) tok=$TOKS/llama3_style_bpe.json ;;
  esac
  extra=(--set model.num_key_value_heads=2)
  [ "$family" = gpt2 ] && extra=(--set model.num_key_value_heads=0)
  case $family in mistral | gemma2 | gemma3) extra+=(--set model.sliding_window=8) ;; esac
  if ! "$LMTRAIN" init --family "$family" "${SHAPE[@]}" "${extra[@]}" --tokenizer "$tok" --seed 1 \
      --out "$dir/init" > "$dir/init.log" 2>&1; then
    echo "$family: skipped ($(tail -1 "$dir/init.log"))"
    rm -rf "$dir"
    continue
  fi
  "$LMTRAIN" tokenize --tokenizer "$tok" --add-special --text "$TEXT" > "$dir/ids.json"
  for dt in f32 bf16; do
    "$LMTRAIN" export --checkpoint "$dir/init" --out "$dir/$dt" --dtype "$dt" --max-shard-size 200kB
    "$LMTRAIN" logits --model "$dir/$dt" --ids-file "$dir/ids.json" \
      --out "$dir/logits_$dt.safetensors" > "$dir/loss_$dt.json"
  done
  echo "$family: $(cat "$dir/loss_f32.json") (f32), $(cat "$dir/loss_bf16.json") (bf16)"
  made=$((made + 1))
done
[ "$made" -gt 0 ] || { echo "no family could be made" >&2; exit 1; }
echo "wrote $made families to $OUT; check them with: python3 scripts/check_export.py $OUT"
