#!/usr/bin/env bash
# Fault-tolerance demo: installs what is missing, builds, and runs a short gossip run of 6 peers on
# Fashion-MNIST (CPU backend, 5 epochs) under churn: two crashes, each followed by a restart from
# the peer's checkpoint, and one peer joining at 50% of training (with catch-up). Prints the peers'
# table and the summary's "churn" section (detection times against the bound, the joiner's first
# evaluation against the swarm's mean). About 1-2 minutes on 2 cores.
# The events are explicit rather than the random model of scripts/scenarios/crash-restart.json, so
# that every kind happens once, at a known point of training, in a run of known length (a restart
# due before its crash's process is reaped waits for it: the apps_churn test "a restart due in the
# same tick as its crash still restarts the peer"). CHURN=... overrides the scenario (a file or a
# shorthand).
# Extra arguments go to gossip-launch (e.g. --catch-up off, --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target gossip-peer gossip-launch
OUT=${OUT:-runs/churn-demo-$(date +%Y%m%d-%H%M%S)}
# Restarted peers of the first cohort are given --min-peers N again; without a short
# --min-peers-timeout they wait up to 120 s for N live peers that may have finished already.
set +e
CHURN=${CHURN:-crash:2@20%,restart:2@30%,crash:4@35%,restart:4@45%,join:1@50%}
"$BUILD/apps/gossip-launch" --peers 6 --backend cpu --epochs 5 --seed 1 --no-plots \
  --churn "$CHURN" \
  --min-peers-timeout 15 --out "$OUT" "$@"
rc=$?
set -e
echo
echo "gossip-launch exit code: $rc"
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
"$PY" - "$OUT/summary.json" <<'EOF'
import json, sys

s = json.load(open(sys.argv[1]))
c = s.get("churn") or {}
pct = lambda x: "-" if x is None else f"{100 * x:.2f}%"
sec = lambda x: "-" if x is None else f"{x:.1f} s"
print(f"final test acc: mean {pct(s.get('final_test_acc_mean'))}, min {pct(s.get('final_test_acc_min'))}; "
      f"failed peers: {s.get('failed_peers')}")
print(f"churn: applied {c.get('applied')}, detection bound {sec(c.get('detection_bound_s'))}, "
      f"all detected within bound: {c.get('all_detected_within_bound')} "
      f"({c.get('detections_not_measured', 0)} not measured)")
for e in c.get("events", []):
    if e.get("kind") in ("crash", "stop"):
        why = e.get("detection_not_measured")
        verdict = f"not measured: {why}" if why else f"within bound: {e.get('within_bound')}"
        print(f"  t={e['t']:6.1f}  {e['kind']:5} peer {e['peer']}: max detection {sec(e.get('max_detection_s'))}"
              f" ({verdict}, not detected by {e.get('not_detected_by')}),"
              f" acc {pct(e.get('acc_before'))} -> {pct(e.get('acc_after'))}, recovery {sec(e.get('recovery_s'))}")
    elif e.get("kind") == "join":
        print(f"  t={e['t']:6.1f}  join  peer {e.get('peer')}: first eval {pct(e.get('first_eval_acc'))}"
              f" vs swarm {pct(e.get('swarm_acc_at_join'))}", end="")
        cu = e.get("catch_up")
        print(f" (caught up to step {cu.get('step')}, {cu.get('bytes')} bytes)" if cu and cu.get("ok") else " (no catch-up)")
EOF
exit "$rc"
