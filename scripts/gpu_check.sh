#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA, run the GPU-labelled tests, run the benchmarks,
# and print a short table last. Usage: scripts/gpu_check.sh [build-dir]
# The GPU machine has no Debian -dev packages: build here and carry the build folder, or build
# there with what it has (cmake, ninja, g++ 13, CUDA 13).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"

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
