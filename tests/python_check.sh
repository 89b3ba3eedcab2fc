#!/usr/bin/env bash
# The Python package's tests: a venv VENV (Debian's python3, seeing its NumPy) with this tree
# installed by `pip install .` and pytest, then pytest on the tests given. The install runs again
# only when a source file is newer than the last one; one install at a time (flock), as CTest may
# run several of these at once. Exit 77 (skipped) with a message where the venv cannot be made or
# pip cannot fetch scikit-build-core, nanobind or pytest (no network).
#   tests/python_check.sh VENV PYTEST_ARGS...
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=$1
shift
PY=/usr/bin/python3
skip() { echo "python_check: SKIPPED: $*"; exit 77; }
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [[ ! -x "$VENV/bin/python" ]]; then
  $PY -c 'import ensurepip, numpy' 2>/dev/null || skip "$PY lacks venv support or NumPy (python3-venv, python3-numpy)"
  $PY -m venv --system-site-packages "$VENV" || skip "cannot make a venv in $VENV"
fi
stamp="$VENV/.gossiptrain-installed"
newer=$(cd "$SRC" && find base core net gossip kernels apps/common python pyproject.toml CMakeLists.txt \
  -newer "$stamp" -type f 2>/dev/null | head -1)
if [[ ! -f "$stamp" || -n "$newer" ]]; then
  start=$(date +%s)
  # The build requirements in the venv itself (--no-build-isolation): their paths stay the same
  # from one install to the next, so the build folder (build/py/) is reused and only what changed
  # compiles again.
  if ! "$VENV/bin/pip" install -q --disable-pip-version-check pytest \
       "scikit-build-core>=0.10" "nanobind>=2.4" >/dev/null 2>&1; then
    skip "pip cannot fetch pytest, scikit-build-core and nanobind (no network?)"
  fi
  log="$VENV/pip-install.log"
  if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
       "$VENV/bin/pip" install --no-build-isolation --disable-pip-version-check "$SRC" \
       >"$log" 2>&1; then
    tail -40 "$log"
    echo "python_check: FAILED: pip install of the package (log: $log)"
    exit 1
  fi
  touch "$stamp"
  echo "python_check: pip install . took $(( $(date +%s) - start )) s"
fi
flock -u 9
cd "$SRC/tests/python"
out=$(mktemp)
"$VENV/bin/python" -m pytest -v -rs -p no:cacheprovider "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
last=$(tail -1 "$out")
rm -f "$out"
# Every test skipped (PyTorch or the data set missing; pytest says 5, "no tests", when a whole
# module is skipped): a skip for CTest too, with pytest's reason above.
if [[ ($rc == 0 || $rc == 5) && $last == *skipped* && $last != *passed* ]]; then
  echo "python_check: SKIPPED: every test skipped (reasons above)"
  exit 77
fi
echo "python_check: pytest exit code $rc"
exit "$rc"
