#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*.cpp; clang, ASan and UBSan) in build-fuzz and runs each one,
# or those named, from its committed corpus, then merges what grew the coverage back into
# tests/data/fuzz/<target>/ (libFuzzer's -merge=1 keeps only inputs that add coverage, so the
# committed corpora stay small; commit them: the normal build replays them, test_fuzz).
# Usage: scripts/fuzz.sh [-r RUNS | -t SECONDS] [-n] [TARGET...]
#   -r RUNS     inputs per target (default 1000000)
#   -t SECONDS  time per target instead of a number of inputs
#   -n          no merge into tests/data/fuzz (a look around that changes nothing)
# One fuzzer runs at a time. A finding (crash, sanitizer report, exception other than UserError,
# timeout of 10 s, more than 2048 MB) stops that target's run and leaves the input in
# build-fuzz/artifacts/<target>/; replay it with build-fuzz/fuzz_<target> FILE. Logs go to
# build-fuzz/logs/<target>.log; the script ends with a line per target (runs, cov, ft, corpus,
# seconds) and exits 1 when any target found something. BUILD_DIR, JOBS (default 2) and
# FUZZ_ARGS (more libFuzzer flags, e.g. -max_len=2048) override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-fuzz}
jobs=${JOBS:-2}
runs=1000000
seconds=""
merge=1
while getopts "r:t:n" opt; do
  case $opt in
    r) runs=$OPTARG ;;
    t) seconds=$OPTARG ;;
    n) merge=0 ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DLMTRAIN_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
    -DLMTRAIN_CUDA=OFF -DLMTRAIN_CAIRO=OFF -DLMTRAIN_PJRT_INCLUDE=/nonexistent \
    -DLMTRAIN_BUILD_TESTS=OFF -DLMTRAIN_BUILD_BENCH=OFF \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
fi
cmake --build "$build" --target lmt_fuzz -j "$jobs"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in fuzz/*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
limit=(-runs="$runs")
[[ -n $seconds ]] && limit=(-max_total_time="$seconds")

mkdir -p "$build/logs"
summary=()
found=0
for t in "${targets[@]}"; do
  bin=$build/fuzz_$t
  seeds=tests/data/fuzz/$t
  [[ -x $bin && -d $seeds ]] || { echo "fuzz.sh: no target '$t' (fuzz/$t.cpp, $seeds)"; exit 2; }
  work=$build/corpus/$t
  rm -rf "$work" && mkdir -p "$work" "$build/artifacts/$t"
  log=$build/logs/$t.log
  echo "== $t: ${limit[*]} (log $log)"
  start=$(date +%s)
  status=0
  # The grown corpus goes to $work (the first directory); the committed one is read only.
  "$bin" "${limit[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t/" ${FUZZ_ARGS:-} "$work" "$seeds" >"$log" 2>&1 ||
    status=$?
  took=$(($(date +%s) - start))
  if [[ $status -ne 0 ]]; then
    found=1
    summary+=("$t: FINDING after ${took}s (exit $status), see $log and $build/artifacts/$t/")
    grep -E 'ERROR|SUMMARY|uncaught|what\(\)' "$log" | head -5 || true
  fi
  # The run's last status line (cov, ft, corp, exec/s) and libFuzzer's "Done N runs in S
  # second(s)", read before the merge below adds its own lines to the log.
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -E 's/[[:space:]]+/ /g' || true)
  runs_done=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1 || true)
  if [[ $merge -eq 1 ]]; then
    "$bin" -merge=1 -rss_limit_mb=2048 -timeout=10 ${FUZZ_ARGS:-} "$seeds" "$work" \
      >>"$log" 2>&1 || echo "fuzz.sh: merge of $t failed, see $log"
  fi
  files=$(find "$seeds" -type f | wc -l)  # after the merge
  bytes=$(du -sb "$seeds" | cut -f1)
  [[ $status -eq 0 ]] &&
    summary+=("$t: ${runs_done:-no Done line}; $last; ${took}s; merged corpus $files files, $bytes bytes")
done
printf '%s\n' "${summary[@]}"
exit $found
