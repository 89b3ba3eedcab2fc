#!/usr/bin/env bash
# The install test: `cmake --install BUILD --prefix P`, then P/bin/gossip-launch runs a 2-peer
# synthetic run from a folder outside both trees and writes its plots. No path of the source or
# build tree may be in an installed program.
#   scripts/test/install-check.sh BUILD         the suite's form (ctest "install:..."): the build
#                                               tree stays where it is (other tests use it)
#   scripts/test/install-check.sh BUILD --move  also moves BUILD away while the installed programs
#                                               run, and back after (scripts/test.sh, after ctest)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: install-check.sh BUILD [--move]}" && pwd)
move=${2:-}
work=$(mktemp -d /tmp/gt-install-check.XXXXXX)
prefix=$work/prefix
moved=""
cleanup() {
  if [[ -n $moved ]]; then mv "$moved" "$build"; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install-check: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install: $(tail -3 "$work/install.log")"
for p in gossip-peer gossip-launch gossip-bench gossip-sim; do
  [[ -x $prefix/bin/$p ]] || fail "no $prefix/bin/$p"
done
for f in plot_run.py plot_sim.py run_metrics.py; do
  [[ -f $prefix/share/gossiptrain/scripts/$f ]] || fail "no share/gossiptrain/scripts/$f"
done
ls "$prefix"/share/gossiptrain/scenarios/*.json >/dev/null || fail "no example scenarios"
# No source or build path compiled in (the CUDA module's, the plot scripts' folder, __FILE__).
for p in "$prefix"/bin/* "$prefix"/lib/gossiptrain/*; do
  [[ -f $p ]] || continue
  for path in "$src/" "$build/"; do
    if grep -qaF "$path" "$p"; then fail "$p holds the path $path"; fi
  done
done

if [[ $move == --move ]]; then
  moved="$build.install-check-away"
  mv "$build" "$moved"
fi
cd "$work"
# --help first: it must answer without the trees.
"$prefix/bin/gossip-launch" --help >/dev/null || fail "gossip-launch --help"
# The README's first run, from the installed programs (default flags but the run folder).
rc=0
"$prefix/bin/gossip-launch" --peers 2 --epochs 1 --data synthetic --out "$work/run" \
  >"$work/launch.log" 2>&1 || rc=$?
if ((rc != 0)); then tail -20 "$work/launch.log" >&2; fail "gossip-launch exited $rc"; fi
[[ -f $work/run/summary.json ]] || fail "no summary.json"
for png in accuracy.png loss.png; do
  [[ -s $work/run/$png ]] || { cat "$work/run/plot.log" >&2 || true; fail "no $png (plots)"; }
done
/usr/bin/python3 - "$work/run/summary.json" <<'PY' || fail "summary.json: plots not ok"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["plots"]["ok"], s["plots"]
PY
echo "install-check: ok: installed programs in $prefix ran a 2-peer run and wrote its plots${moved:+ (build tree moved away)}"
