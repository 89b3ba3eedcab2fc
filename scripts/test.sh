#!/usr/bin/env bash
# The README's test command: installs what is missing, builds (CUDA backend too when nvcc is
# present), runs every test with CTest ([cuda] tests skip with a message when there is no GPU), then
# builds the layers that parse what the network sends (net/ and gossip/) with AddressSanitizer + UBSan
# (CMake preset "asan") and runs their tests, the loop pool's tests and the parser fuzz smoke test
# there, then builds the libFuzzer targets with clang (preset "fuzz") and runs each 60 s from its
# corpus (scripts/test/fuzz.sh). GT_SKIP_ASAN=1 skips those two sanitizer stages. After the main suite, the install test runs once more with the build
# tree moved away (scripts/test/install-check.sh).
#   scripts/test.sh --quick   the unit tests only (CTest label "unit", not "slow"), no install
#                             test, no AddressSanitizer stage: a few minutes.
#   scripts/test.sh [ctest args...]   everything (what CI runs).
# Every stage runs even when an earlier one failed (a failing test must not hide the sanitizer's
# findings); the script ends with one line per stage and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == --quick ]]; then
  quick=1
  shift
  set -- -L unit -LE slow "$@"
fi
bash scripts/setup.sh || { echo "test.sh: scripts/setup.sh failed: nothing can be built" >&2; exit 1; }
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}

results=()
failed=0
# stage NAME COMMAND...: runs COMMAND, records NAME's result and time, never stops the script.
stage() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "test.sh: --- $name"
  "$@"
  rc=$?
  if ((rc == 0)); then
    results+=("ok      $name ($((SECONDS - t0)) s)")
  else
    results+=("FAILED  $name (exit $rc, $((SECONDS - t0)) s)")
    failed=1
  fi
  return $rc
}
skipped() { results+=("skipped $1 ($2)"); }
# failed_tests DIR: names the tests that ctest in DIR last failed under the stage's line, so that
# the summary at the end (all that a CI log's tail may show) says which ones.
failed_tests() {
  local log=$1/Testing/Temporary/LastTestsFailed.log line
  [[ -s $log ]] || return 0
  while IFS= read -r line; do results+=("          failed: ${line#*:}"); done <"$log"
}
report() {
  echo
  echo "test.sh: stages"
  printf '  %s\n' "${results[@]}"
  if ((failed)); then echo "test.sh: FAILED (see the stages above)"; exit 1; fi
  echo "test.sh: all stages passed"
  exit 0
}

build_main() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BUILD" -j "$JOBS"
}
main_suite() {
  # TensorBoard's reader and the safetensors package for the observability tests (they skip,
  # saying so, without it).
  bash scripts/test/obs-venv.sh "$BUILD/obs-venv" || echo "test.sh: no obs venv; its tests will skip"
  (cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@")
}
asan_stage() {
  cmake --preset asan >/dev/null &&
    cmake --build build-asan -j "$JOBS" --target test_net test_gossip test_kernels fuzz_net_driver fuzz_gossip_driver &&
    # The loop pool's many-callers stress test too: the training and network threads share it.
    # Less two simulations that run their exchanges hundreds of times over (2 x 40 losses, 12 wire
    # cases of 8 peers): 149 s and 128 s of this stage's tests at -O0, the same code paths as the
    # shorter wire and failure tests it keeps; the main suite runs them.
    (cd build-asan && ctest --output-on-failure -j "$JOBS" --timeout 600 -R '^(net|gossip)|^kernels:loop pool' \
      -E 'a partner lost mid-exchange: all or nothing on each side|lossy wire encodings also reach consensus')
}

if stage "build ($BUILD)" build_main; then
  stage "main suite (ctest)" main_suite "$@" || failed_tests "$BUILD"
  if ((quick)); then
    echo "test.sh: --quick: unit tests only; the full run is scripts/test.sh without --quick"
    report
  fi
  stage "install check" bash scripts/test/install-check.sh "$BUILD" --move
else
  skipped "main suite (ctest)" "the build failed"
  ((quick)) && report
  skipped "install check" "the build failed"
fi

if [[ "${GT_SKIP_ASAN:-0}" != 1 ]]; then
  stage "AddressSanitizer + UBSan (build-asan)" asan_stage || failed_tests build-asan
else
  skipped "AddressSanitizer + UBSan" "GT_SKIP_ASAN=1"
fi
# The libFuzzer targets (clang, preset "fuzz": only they and what they link are built), 60 s each,
# both at once, from their corpus in tests/fuzz/corpus/ (scripts/test/fuzz.sh). GT_SKIP_ASAN=1 skips it.
fuzz_stage() {
  cmake --preset fuzz >/dev/null && cmake --build --preset fuzz -j "$JOBS" && bash scripts/test/fuzz.sh --time 60
}
if [[ "${GT_SKIP_ASAN:-0}" != 1 ]]; then
  stage "fuzzers, 60 s each (build-fuzz)" fuzz_stage
else
  skipped "fuzzers" "GT_SKIP_ASAN=1"
fi
report
