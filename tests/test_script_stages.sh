#!/usr/bin/env bash
# scripts/test.sh runs every stage and reports every failure: with a `cmake` whose builds fail, the
# main suite and the install check are reported skipped, the AddressSanitizer stage still runs (and
# fails too), the stage table names both failures, and the exit code is 1.
set -uo pipefail
src=${1:?usage: test_script_stages.sh SOURCE_DIR}
work=$(mktemp -d /tmp/gt-test-stages.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat >"$work/bin/cmake" <<'FAKE'
#!/bin/sh
# A cmake whose builds fail; configure steps succeed. Logs every call.
echo "cmake $*" >>"$GT_FAKE_LOG"
case " $* " in *" --build "*) echo "fake cmake: build failed" >&2; exit 1 ;; esac
exit 0
FAKE
cp "$work/bin/cmake" "$work/bin/ctest"
chmod +x "$work/bin/cmake" "$work/bin/ctest"
export GT_FAKE_LOG=$work/calls.log
out=$(cd "$work" && PATH="$work/bin:$PATH" BUILD="$work/build" bash "$src/scripts/test.sh" 2>&1)
rc=$?
echo "$out" | sed -n '/test.sh: stages/,$p'
fail() { echo "FAIL: $*"; echo "--- output:"; echo "$out" | tail -30; exit 1; }
((rc == 1)) || fail "exit code $rc, expected 1"
grep -q "FAILED  build" <<<"$out" || fail "the failed build is not reported"
grep -q "skipped main suite" <<<"$out" || fail "the main suite is not reported skipped"
grep -q "FAILED  AddressSanitizer" <<<"$out" || fail "the sanitizer stage did not run after the failed build"
grep -q -- "--build build-asan" "$GT_FAKE_LOG" || fail "the sanitizer build was never attempted"
echo "ok: every stage ran and both failures are reported"
