#!/usr/bin/env bash
# A venv (default build/k8s-venv) with kubernetes-validate, which checks manifests against the
# Kubernetes OpenAPI schemas it ships (offline), made from Debian's python3. Idempotent: an
# existing venv with the package is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-build/k8s-venv}
PY=/usr/bin/python3
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import kubernetes_validate, yaml' 2>/dev/null; then
  echo "k8s-venv: $VENV ready"
  exit 0
fi
if ! $PY -c 'import ensurepip' 2>/dev/null; then
  echo "k8s-venv: $PY has no venv support (Debian package python3-venv)" >&2
  exit 2
fi
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check kubernetes-validate pyyaml
"$VENV/bin/python" -c 'import kubernetes_validate; print("k8s-venv: '"$VENV"' kubernetes-validate", kubernetes_validate.__version__ if hasattr(kubernetes_validate, "__version__") else "")'
