#!/usr/bin/env bash
# The Python side of the observability tests: a venv (default build/obs-venv) with TensorBoard's
# event reader, the safetensors package and NumPy, made from Debian's python3 (the first python3
# on PATH may be another one). Idempotent: an existing venv with the packages is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-build/obs-venv}
PY=/usr/bin/python3
if [[ -x "$VENV/bin/python" ]] &&
   "$VENV/bin/python" -c 'import tensorboard, safetensors, numpy' 2>/dev/null; then
  echo "obs-venv: $VENV ready"
  exit 0
fi
if ! $PY -c 'import ensurepip' 2>/dev/null; then
  echo "obs-venv: $PY has no venv support (Debian package python3-venv)" >&2
  exit 2
fi
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check tensorboard safetensors numpy
"$VENV/bin/python" -c 'import tensorboard, safetensors, numpy; print("obs-venv:", "'"$VENV"'", "tensorboard", tensorboard.__version__)'
