#!/usr/bin/env bash
# Installs every Debian package that building lmtrain, its tests and the demo need, then the
# Python environment of the reference tests: a virtual environment outside the repository (so
# every clone on the machine shares it; default ~/.cache/lmtrain/venv, or LMTRAIN_VENV) made from
# the pinned scripts/requirements.txt (torch, transformers, peft, tokenizers, ... and XLA's CPU
# PJRT plugin). lmtrain itself never needs Python. Idempotent, non-interactive and quiet: what is
# already there is left alone; the environment is remade when requirements.txt changes.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev libopenblas-openmp-dev libomp-dev libdnnl-dev
  libyaml-cpp-dev libyaml-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libsentencepiece-dev libsimdjson-dev libsnappy-dev libzstd-dev libxxhash-dev
  libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcairo2-dev fonts-dejavu-core
  fortunes
  openmpi-bin
  python3 python3-venv
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

# ---- the reference tests' Python environment ----
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${LMTRAIN_VENV:-$HOME/.cache/lmtrain/venv}
req=$root/scripts/requirements.txt
want=$(grep -v "^#" "$req" | sha256sum | cut -d" " -f1)
if [ "$(cat "$venv/.lmtrain-requirements" 2>/dev/null)" = "$want" ]; then
  echo "setup: Python environment $venv up to date"
  exit 0
fi
[ -x "$venv/bin/python3" ] || /usr/bin/python3 -m venv "$venv"
log=$venv/setup.log
echo "setup: installing the reference tests' Python packages into $venv" \
     "(the first time: 3.3 GB to download, 6.6 GB on disk, several minutes)"
if ! "$venv/bin/python3" -m pip install --disable-pip-version-check --no-input -q \
    --retries 2 --timeout 60 -r "$req" > "$log" 2>&1; then
  if grep -qiE "connection|resolve|network|timed out|proxy|No matching distribution" "$log"; then
    echo "setup: PyPI could not be reached, so the Python environment of the reference tests" \
         "($venv) is not complete; lmtrain builds and trains without it, but the tests labelled" \
         "'reference' fail until scripts/setup.sh is run again with PyPI in reach." \
         "pip said: $(grep -iE 'connection|resolve|timed out|proxy|error' "$log" | head -1)" >&2
    exit 0
  else
    echo "setup: pip could not install scripts/requirements.txt into $venv; see $log" >&2
  fi
  exit 1
fi
echo "$want" > "$venv/.lmtrain-requirements"
echo "setup: Python environment $venv ready"
