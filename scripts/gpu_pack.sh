#!/usr/bin/env bash
# Packs a built lmtrain for a GPU machine that has no Debian libraries: the binary, the shared
# libraries it links that are not the C and C++ runtimes (the machine's own, newer ones load the
# PJRT plugin), the CUPTI kernel tracer where the build has it, and the demo's corpus. Writes
# PACK (a .tgz) for scripts/gpu_lease.sh, gpu_profile.sh and gpu_trace.sh.
#   scripts/gpu_pack.sh BUILD_DIR PACK
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR PACK" >&2; exit 2; }
build=$1 pack=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/fortunes"
cp "$build/lmtrain" "$stage/"
ldd "$build/lmtrain" | awk '/=>/ {print $3}' |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|ld-linux' |
  xargs -I{} cp -L {} "$stage/lib/"
if [ -f "$build/liblmtrain_kernel_trace.so" ]; then  # the CUPTI kernel tracer and its CUPTI
  cp "$build/liblmtrain_kernel_trace.so" "$stage/lib/"
  ldd "$build/liblmtrain_kernel_trace.so" | awk '/libcupti/ {print $3}' | xargs -I{} cp -L {} "$stage/lib/"
fi
cp -a /usr/share/games/fortunes/. "$stage/fortunes/"
mkdir -p "$(dirname "$pack")"
tar czf "$pack" -C "$stage" .
ls -la "$pack"
