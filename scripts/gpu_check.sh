#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA, run the GPU-labelled tests, run the benchmarks,
# then lmtrain beside its JAX and PyTorch peers on three shapes, and print a short table after each
# part. Usage: scripts/gpu_check.sh [build-dir]
# The GPU machine has no Debian -dev packages: build here and carry the build folder, or build
# there with what it has (cmake, ninja, g++ 13, CUDA 13).
#
# The peers' part runs configs/bench/gpt2-124m.yaml (B16 T1024), configs/bench/llama-1b.yaml
# (B4 T2048) and the same Llama at B1 T32768 with activation checkpointing, each by lmtrain (pjrt on
# the CUDA plugin, bf16), bench/jax_train_bench.py (bf16, XLA's attention and cuDNN's) and
# bench/torch_train_bench.py (bf16 autocast, torch.compile), in rounds (lmtrain, jax, torch, then
# again) while GPU_CHECK_BUDGET_S (default 1500) lasts, at most GPU_CHECK_ROUNDS (2); a failed run
# (out of memory) is a row of the table and is not repeated. A runner that is missing (no CUDA
# plugin, no JAX with a GPU, no torch) is skipped with the reason. PYTHON picks the interpreter of
# the peers (default python3); GPU_CHECK_STEPS the timed steps (10).
# GPU_CHECK_DRY=1 tries the peers' part on the CPU with tiny shapes, without building or testing
# (LMTRAIN=path/to/lmtrain; lmtrain runs on its default PJRT plugin, torch on the CPU).
# To fit a short lease: GPU_CHECK_PEERS_ONLY=1 skips the build, tests and lmtrain's own benchmarks
# (LMTRAIN names a binary built elsewhere); GPU_CHECK_SHAPES picks shapes by index and order
# ("0 2 1": GPT-2, then the 1B at T32768, then at T2048); GPU_CHECK_RUNNERS picks runners;
# GPU_CHECK_DEADLINE_S starts no run after that many seconds of the peers' part and cuts the last
# run to fit; GPU_CHECK_DUMP=1 has XLA dump lmtrain's first-round programs (optimized HLO, buffer
# assignment) under $OUT/xla_<shape>.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
dry=${GPU_CHECK_DRY:-0}
[ "$dry" = 0 ] || dry=1

if [ "$dry" = 0 ] && [ "${GPU_CHECK_PEERS_ONLY:-0}" = 0 ]; then  # the build, the GPU tests and lmtrain's own benchmarks (not indented)
if [ ! -x "$build/lmtrain" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLMTRAIN_CUDA=ON \
    -DLMTRAIN_BUILD_BENCH=OFF > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
fi
"$build/lmtrain" --version
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

ctest --test-dir "$build" -L cuda --output-on-failure 2>&1 | tee "$out/ctest_cuda.log"
tests_rc=${PIPESTATUS[0]}

# The Hugging Face references need no GPU and are no longer run here: the export check is
# tests/reference/test_export.py (ctest -L reference, in CI), and scripts/make_hf_fixtures.py runs
# wherever scripts/setup.sh's Python environment is.

# The PJRT backend on the CUDA plugin of the jax-cuda13-pjrt wheel, when the build has PJRT and
# the wheel is installed: the same step program as on XLA's CPU plugin.
cuda_plugin=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import jax_plugins  # a namespace package: xla_cuda12, xla_cuda13, ... below it
    libs = [l for d in jax_plugins.__path__ for l in sorted(glob.glob(os.path.join(d, "*cuda*", "*.so")))]
    print(libs[0] if libs else "")
except Exception:
    print("")
PY
)
echo "CUDA PJRT plugin: ${cuda_plugin:-none found}"

rows=()
for cfg in configs/bench/tiny.yaml configs/bench/gpt2-small-llama.yaml; do
  for backend in cpu cuda pjrt pjrt-bf16; do
    sets=(--set train.backend=${backend%-bf16})
    if [ "${backend%-bf16}" = pjrt ]; then
      [ -n "$cuda_plugin" ] || continue
      sets+=(--set "train.pjrt_plugin=$cuda_plugin")
    fi
    [ "$backend" = pjrt-bf16 ] && sets+=(--set train.precision=bf16)
    line=$("$build/lmtrain" bench --config "$cfg" --steps 3 "${sets[@]}" 2>&1 | tail -1)
    echo "$cfg $backend: $line" | tee -a "$out/bench.log"
    rows+=("$(python3 -c 'import json,sys
try:
  j=json.loads(sys.argv[3]); print(f"{sys.argv[1]:<40} {sys.argv[2]:<9} {j[\"tokens_per_s\"]:>12.0f} {j[\"step_ms\"]:>10.1f} {j[\"mfu\"]:>6.3f} {j[\"peak_rss_bytes\"]/2**30:>8.2f}")
except Exception: print(f"{sys.argv[1]:<40} {sys.argv[2]:<9} (no result: {sys.argv[3][:60]})")' "$cfg" "$backend" "$line")")
  done
done

echo
echo "GPU tests: exit code $tests_rc"
printf '%-40s %-9s %12s %10s %6s %8s\n' config backend tokens/s step_ms mfu rss_GiB
printf '%s\n' "${rows[@]}"
fi  # dry
if [ "$dry" = 0 ] && [ "${GPU_CHECK_PEERS_ONLY:-0}" != 0 ]; then
  cuda_plugin=$(python3 -c 'import glob, os, jax_plugins; print(next(iter(sorted(l for d in jax_plugins.__path__ for l in glob.glob(os.path.join(d, "*cuda*", "*.so")))), ""))' 2>/dev/null)
  echo "CUDA PJRT plugin: ${cuda_plugin:-none found}"
fi

# ---- lmtrain beside its JAX and PyTorch peers ----
py=${PYTHON:-python3}
steps=${GPU_CHECK_STEPS:-10}
rounds=${GPU_CHECK_ROUNDS:-2}
budget=${GPU_CHECK_BUDGET_S:-1500}
run_timeout=${GPU_CHECK_RUN_TIMEOUT_S:-900}
lmtrain_bin=${LMTRAIN:-$build/lmtrain}
shapes=("gpt2-124m B16 T1024" "llama-1b B4 T2048" "llama-1b B1 T32768 ckpt")
configs=(configs/bench/gpt2-124m.yaml configs/bench/llama-1b.yaml configs/bench/llama-1b.yaml)
shape_sets=("" "" "data.seq_len=32768 train.micro_batch_size=1 train.activation_checkpointing=true")
torch_device=cuda
if [ "$dry" = 1 ]; then
  steps=${GPU_CHECK_STEPS:-2}
  torch_device=cpu
  cuda_plugin=""
  tiny="model.vocab_size=512 model.hidden_size=64 model.num_hidden_layers=2"
  tiny="$tiny model.num_attention_heads=4"
  tiny_llama="$tiny model.intermediate_size=128 model.num_key_value_heads=2 model.head_dim=16"
  shapes=("gpt2 tiny B2 T64 (dry)" "llama tiny B2 T64 (dry)" "llama tiny B1 T256 ckpt (dry)")
  shape_sets=("$tiny model.intermediate_size=256 data.seq_len=64 train.micro_batch_size=2"
              "$tiny_llama data.seq_len=64 train.micro_batch_size=2"
              "$tiny_llama data.seq_len=256 train.micro_batch_size=1
               train.activation_checkpointing=true")
fi
runners=(${GPU_CHECK_RUNNERS:-lmtrain jax-xla jax-cudnn torch-compile})
order=(${GPU_CHECK_SHAPES:-${!shapes[@]}})
deadline=${GPU_CHECK_DEADLINE_S:-0}

declare -A skip last_s failed
if [ ! -x "$lmtrain_bin" ]; then
  skip[lmtrain]="no lmtrain binary at $lmtrain_bin"
elif [ "$dry" = 0 ] && [ -z "${cuda_plugin:-}" ]; then
  skip[lmtrain]="no CUDA PJRT plugin"
fi
jax_backend=$("$py" -c 'import jax; print(jax.default_backend())' 2>/dev/null)
if [ -z "$jax_backend" ]; then
  skip[jax-xla]="no jax in $py"
elif [ "$dry" = 0 ] && [ "$jax_backend" != gpu ]; then
  skip[jax-xla]="JAX's backend is $jax_backend, not gpu"
fi
[ -z "${skip[jax-xla]:-}" ] || skip[jax-cudnn]=${skip[jax-xla]}
torch_cuda=$("$py" -c 'import torch, transformers; print(torch.cuda.is_available())' 2>/dev/null)
if [ -z "$torch_cuda" ]; then
  skip[torch-compile]="no torch and transformers in $py"
elif [ "$dry" = 0 ] && [ "$torch_cuda" != True ]; then
  skip[torch-compile]="torch sees no CUDA device"
fi

results="$out/peers.tsv"
: > "$results"
run_peer() {  # $1: shape index, $2: runner, $3: round; one line into $results
  local i=$1 runner=$2 log="$out/peer_$1_$2_$3.log" sets=() cmd=() kv
  for kv in ${shape_sets[$i]}; do sets+=(--set "$kv"); done
  case $runner in
    lmtrain)
      cmd=("$lmtrain_bin" bench --config "${configs[$i]}" --steps "$steps" "${sets[@]}"
           --set train.backend=pjrt --set train.precision=bf16)
      [ -z "${cuda_plugin:-}" ] || cmd+=(--set "train.pjrt_plugin=$cuda_plugin") ;;
    jax-*)
      cmd=("$py" bench/jax_train_bench.py --config "${configs[$i]}" --steps "$steps" "${sets[@]}"
           --precision bf16 --attention "${runner#jax-}") ;;
    torch-compile)
      cmd=("$py" bench/torch_train_bench.py --config "${configs[$i]}" --steps "$steps" "${sets[@]}"
           --precision bf16 --compile --device "$torch_device") ;;
  esac
  local t0=$SECONDS limit=$run_timeout
  if ((deadline > 0)); then
    local left=$((deadline - (SECONDS - start)))
    ((left < limit)) && limit=$left
    ((limit >= 20)) || { echo "${shapes[$i]} / $runner: no time left"; return; }
  fi
  if [ "$runner" = lmtrain ] && [ "$3" = 1 ] && [ "${GPU_CHECK_DUMP:-0}" != 0 ]; then
    XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=$out/xla_$i --xla_dump_hlo_as_text" \
      timeout "$limit" "${cmd[@]}" > "$log" 2>&1
  else
    timeout "$limit" "${cmd[@]}" > "$log" 2>&1
  fi
  local rc=$?
  last_s[$i,$runner]=$((SECONDS - t0))
  [ "$rc" = 0 ] || failed[$i,$runner]=1
  echo "${shapes[$i]} / $runner, round $3: exit $rc in ${last_s[$i,$runner]} s:" \
    "$(tail -c 200 "$log" | tail -1)"
  printf '%s\t%s\t%s\t%s\n' "$i" "$runner" "$rc" "$log" >> "$results"
}

echo
echo "Peers: $py (JAX backend ${jax_backend:-none}, torch CUDA ${torch_cuda:-none})," \
  "$steps steps a run"
start=$SECONDS
for ((round = 1; round <= rounds; round++)); do
  for i in "${order[@]}"; do
    for runner in "${runners[@]}"; do
      [ -z "${skip[$runner]:-}" ] && [ -z "${failed[$i,$runner]:-}" ] || continue
      # After the first round, a run starts only if its last duration still fits the budget.
      if ((round > 1 && SECONDS - start + ${last_s[$i,$runner]:-0} > budget)); then continue; fi
      if ((deadline > 0 && SECONDS - start + 20 > deadline)); then continue; fi
      run_peer "$i" "$runner" "$round"
    done
  done
done
for runner in "${runners[@]}"; do
  [ -z "${skip[$runner]:-}" ] || for i in "${order[@]}"; do
    printf '%s\t%s\tskip\t%s\n' "$i" "$runner" "${skip[$runner]}" >> "$results"
  done
done

echo
python3 - "$results" "${runners[*]}" "${shapes[@]}" <<'PY'
import json, re, statistics, sys
results, order, shapes = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
runs = {}  # (shape index, runner) -> [(tokens/s, step ms, device peak bytes) or reason]
for line in open(results):
    i, runner, rc, where = line.rstrip("\n").split("\t")
    key = (int(i), runner)
    if rc == "skip":
        runs.setdefault(key, []).append("skipped: " + where)
        continue
    text = open(where, errors="replace").read()
    obj = {}
    for l in reversed(text.splitlines()):
        if l.startswith("{"):
            try:
                obj = json.loads(l)
                break
            except ValueError:
                pass
    if rc == "0" and "tokens_per_s" in obj:
        peak = obj.get("device_peak_bytes")  # lmtrain's is under "pjrt"
        if not isinstance(peak, (int, float)):
            peak = (obj.get("pjrt") or {}).get("device_peak_bytes")
        runs.setdefault(key, []).append((obj["tokens_per_s"], obj["step_ms"], peak))
    elif re.search(r"out of memory|RESOURCE_EXHAUSTED|OutOfMemory", text, re.I):
        runs.setdefault(key, []).append("out of memory")
    elif rc == "124":
        runs.setdefault(key, []).append("timed out")
    else:
        lines = [l for l in text.splitlines() if l.strip()] or ["no output"]
        last = obj.get("error") or lines[-1]
        runs.setdefault(key, []).append(f"failed (exit {rc}): {last.strip()[:70]}")
w = max(len(s) for s in shapes + ["shape"])
print(f"{'shape':<{w}} {'runner':<14} {'tokens/s':>10} {'step ms':>9} {'peak GiB':>9} "
      f"{'vs fastest':>10} {'runs':>4}")
for i, shape in enumerate(shapes):
    rows = []
    for runner in order:
        got = runs.get((i, runner))
        if not got:
            continue
        ok = [g for g in got if isinstance(g, tuple)]
        if ok:
            peaks = [g[2] for g in ok if isinstance(g[2], (int, float))]
            rows.append((runner, statistics.median(g[0] for g in ok),
                         statistics.median(g[1] for g in ok),
                         f"{max(peaks) / 2**30:.1f}" if peaks else "n/a", len(ok)))
        else:
            rows.append((runner, got[0]))
    best = max((r[1] for r in rows if len(r) > 2), default=None)
    for r in rows:
        if len(r) > 2:
            print(f"{shape:<{w}} {r[0]:<14} {r[1]:>10.0f} {r[2]:>9.1f} {r[3]:>9} "
                  f"{r[1] / best:>10.2f} {r[4]:>4}")
        else:
            print(f"{shape:<{w}} {r[0]:<14} {r[1]}")
PY
