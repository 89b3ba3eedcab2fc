#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (CUDA backend too when nvcc is
# present), runs every test with CTest ([cuda] tests skip with a message when there is no GPU), then
# builds the layers that parse what the network sends (net/ and gossip/) with AddressSanitizer + UBSan
# (CMake preset "asan") and runs their tests, the loop pool's tests and the parser fuzz smoke test
# there. GT_SKIP_ASAN=1
# skips that second stage. After the main suite, the install test runs once more with the build
# tree moved away (scripts/install-check.sh).
#   scripts/test.sh --quick   the unit tests only (CTest label "unit", not "slow"), no install
#                             test, no AddressSanitizer stage: a few minutes.
#   scripts/test.sh [ctest args...]   everything (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == --quick ]]; then
  quick=1
  shift
  set -- -L unit -LE slow "$@"
fi
bash scripts/setup.sh
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$JOBS"
# TensorBoard's reader and the safetensors package for the observability tests (they skip, saying
# so, without it).
bash scripts/obs-venv.sh "$BUILD/obs-venv" || echo "test.sh: no obs venv; its tests will skip"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@")
echo "test.sh: main suite done in $(( $(date +%s) - start )) s"
if ((quick)); then
  echo "test.sh: --quick: unit tests only; the full run is scripts/test.sh without --quick"
  exit 0
fi
bash scripts/install-check.sh "$BUILD" --move

if [[ "${GT_SKIP_ASAN:-0}" != 1 ]]; then
  start=$(date +%s)
  cmake --preset asan >/dev/null
  cmake --build build-asan -j "$JOBS" --target test_net test_gossip test_kernels fuzz_net_driver fuzz_gossip_driver
  # The loop pool's many-callers stress test too: the training and network threads share it.
  (cd build-asan && ctest --output-on-failure -j "$JOBS" --timeout 600 -R '^(net|gossip)|^kernels:loop pool')
  echo "test.sh: AddressSanitizer stage done in $(( $(date +%s) - start )) s"
fi
# The libFuzzer targets (clang, preset "fuzz": only they and what they link are built), 60 s each,
# both at once, from their corpus in tests/fuzz/corpus/ (scripts/fuzz.sh). GT_SKIP_ASAN=1 skips it.
if [[ "${GT_SKIP_ASAN:-0}" != 1 ]]; then
  start=$(date +%s)
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$JOBS"
  bash scripts/fuzz.sh --time 60
  echo "test.sh: fuzz stage done in $(( $(date +%s) - start )) s"
fi
