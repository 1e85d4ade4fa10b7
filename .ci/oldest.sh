#!/usr/bin/env bash
# The oldest leg of the support matrix: the lowest Python and dependency versions that
# pyproject.toml declares, in their own venv; then the suite.
#   .ci/oldest.sh [pytest args]     OLDEST_PYTHON=python3.11  OLDEST_VENV=.venv-oldest
#   .ci/oldest.sh --setup-only      build the venv, run nothing (.ci/run builds every leg's first)
# uv resolves the runtime dependencies and the ray extra at `--resolution lowest-direct` (each
# at the lowest release its range allows; torch from PyPI: its default build runs on CPU too);
# the test tools of the dev extra then resolve to their newest around those pins.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${OLDEST_PYTHON:-python3}
VENV=${OLDEST_VENV:-.venv-oldest}
# uv reads no pip configuration: PyPI only, with the system's CA bundle
[ -f /etc/ssl/certs/ca-certificates.crt ] && export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
t0=$(date +%s)
want="$(sha256sum pyproject.toml | cut -c1-16) $($PY -V)"
if [ "$(cat "$VENV/.ckpt-oldest" 2>/dev/null)" != "$want" ]; then
  rm -rf "$VENV"
  $PY -m venv "$VENV"
  "$VENV/bin/pip" install -q --isolated uv
  uv=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python")
  "${uv[@]}" --resolution lowest-direct -e ".[ray]"
  "$VENV/bin/uv" pip freeze --python "$VENV/bin/python" --exclude-editable > "$VENV/lowest.txt"
  "${uv[@]}" -c "$VENV/lowest.txt" -e ".[dev,ray]"
  echo "$want" > "$VENV/.ckpt-oldest"
  echo "oldest: venv $(($(date +%s) - t0)) s, $(du -sh "$VENV" | cut -f1)"
fi
"$VENV/bin/python" -c 'import sys, importlib.metadata as m
print("oldest: python", sys.version.split()[0], *(f"{p} {m.version(p)}" for p in
  ("numpy", "safetensors", "pydantic", "typer", "huggingface_hub", "ml_dtypes", "rich", "pyyaml",
   "torch", "ray", "triton")))'
[ "${1:-}" = "--setup-only" ] && exit 0
t1=$(date +%s)
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
echo "oldest: suite $(($(date +%s) - t1)) s"
