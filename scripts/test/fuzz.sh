#!/usr/bin/env bash
# Runs the libFuzzer targets for a bounded time, all at once, each from its corpus in
# tests/fuzz/corpus/<target>/. Build them first: cmake --preset fuzz && cmake --build --preset fuzz
#
#   scripts/test/fuzz.sh [--time SECONDS] [--build DIR] [--merge] [TARGET...]
#
# --time SECONDS  how long each target runs (default 60; scripts/test.sh runs 60)
# --build DIR     the fuzz build tree (default build-fuzz)
# --merge         afterwards, replace tests/fuzz/corpus/<target>/ by the smallest set of inputs,
#                 from it and from what this run found, that covers as much (libFuzzer -merge=1)
# TARGET          fuzz_net, fuzz_gossip (default: both)
#
# The corpus in the repository is only read: new inputs go to DIR/corpus/<target>/. A finding (a
# crash, a sanitizer report, an input that runs over 20 s, a leak) is written to
# DIR/findings/<target>/, its report is printed, and the script exits 1. Each target's whole log is
# DIR/fuzz-<target>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
TIME=60
BUILD=build-fuzz
MERGE=0
targets=()
while (($#)); do
  case $1 in
    --time) TIME=${2:?--time needs SECONDS}; shift 2 ;;
    --build) BUILD=${2:?--build needs a DIR}; shift 2 ;;
    --merge) MERGE=1; shift ;;
    -h|--help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    fuzz_net|fuzz_gossip) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $TIME =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time wants a whole number of seconds, not '$TIME'" >&2; exit 2; }
((${#targets[@]})) || targets=(fuzz_net fuzz_gossip)
for t in "${targets[@]}"; do
  [[ -x $BUILD/tests/fuzz/$t ]] || {
    echo "fuzz.sh: $BUILD/tests/fuzz/$t not built (cmake --preset fuzz && cmake --build --preset fuzz)" >&2
    exit 2
  }
done

pids=()
for t in "${targets[@]}"; do
  mkdir -p "$BUILD/corpus/$t" "$BUILD/findings/$t"
  "$BUILD/tests/fuzz/$t" -max_total_time="$TIME" -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$BUILD/findings/$t/" "$BUILD/corpus/$t" "tests/fuzz/corpus/$t" \
    >"$BUILD/fuzz-$t.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then
    echo "fuzz.sh: $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/fuzz-$t.log" |
      grep -o '[0-9]*$') inputs in ${TIME} s, no finding"
  else
    failed=1
    echo "fuzz.sh: $t: FINDING (input in $BUILD/findings/$t/, log $BUILD/fuzz-$t.log):" >&2
    grep -v '^#[0-9]' "$BUILD/fuzz-$t.log" | tail -n 60 >&2
  fi
done
((failed)) && exit 1

if ((MERGE)); then
  for t in "${targets[@]}"; do
    merged=$(mktemp -d "$BUILD/merge-$t.XXXXXX")
    "$BUILD/tests/fuzz/$t" -merge=1 "$merged" "tests/fuzz/corpus/$t" "$BUILD/corpus/$t" \
      >"$BUILD/merge-$t.log" 2>&1
    rm -rf "tests/fuzz/corpus/$t"
    mv "$merged" "tests/fuzz/corpus/$t"
    chmod 755 "tests/fuzz/corpus/$t"
    echo "fuzz.sh: $t: corpus merged to $(ls "tests/fuzz/corpus/$t" | wc -l) inputs," \
      "$(du -sk "tests/fuzz/corpus/$t" | cut -f1) KiB"
  done
fi
