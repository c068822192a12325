#!/usr/bin/env bash
# Runs one module of the reference tier (tests/reference/test_*.py) with the Python environment
# that scripts/setup.sh makes, or, with --check, only tells whether that environment is ready.
# A missing or outdated environment is a failure that says how to make it: the reference tests
# never pass or skip without their references.
#   tests/run_reference.sh [--check] [tests/reference/test_x.py [pytest args...]]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${LMTRAIN_PYTHON:-${LMTRAIN_VENV:-$HOME/.cache/lmtrain/venv}/bin/python3}
venv=$(dirname "$(dirname "$py")")
want=$(grep -v "^#" "$root/scripts/requirements.txt" | sha256sum | cut -d" " -f1)
have=$(cat "$venv/.lmtrain-requirements" 2>/dev/null || true)
if [ ! -x "$py" ]; then
  echo "reference tests: no Python environment at $venv; make it with scripts/setup.sh" \
       "(a virtual environment from scripts/requirements.txt; needs PyPI)" >&2
  exit 1
fi
if [ "$have" != "$want" ]; then
  echo "reference tests: the environment at $venv does not hold scripts/requirements.txt as it" \
       "is now; update it with scripts/setup.sh" >&2
  exit 1
fi
[ "${1:-}" = "--check" ] && exit 0
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -v -p no:cacheprovider --rootdir "$root/tests/reference" "$@"
