#!/usr/bin/env bash
# Every Catch2 test name survives catch_discover_tests whole: CTest splits a name at ';' into two
# tests that both fail, and a name starting with '-' reads as a flag. Arg: the tests' build dir.
set -u
bad=0
found=0
for b in "$1"/test_*; do
  [[ -f "$b" && -x "$b" ]] || continue
  found=1
  # Catch2 v2 exits with the number of tests listed, so the output, not the status, says.
  names=$("$b" --list-test-names-only 2>/dev/null)
  [[ -n "$names" ]] || { echo "$b: cannot list its tests"; bad=1; continue; }
  hits=$(grep -e ';' -e '^-' <<<"$names")
  if [[ -n "$hits" ]]; then
    echo "$b: test names CTest cannot keep whole:"
    echo "$hits"
    bad=1
  fi
done
[[ $found == 1 ]] || { echo "no test executables in $1"; exit 1; }
exit $bad
