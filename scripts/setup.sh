#!/usr/bin/env bash
# Installs every Debian package that building lmtrain, its tests and the demo need.
# Idempotent and non-interactive: packages already present are left alone.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas-openmp-dev libomp-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libsentencepiece-dev libsimdjson-dev libsnappy-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"
