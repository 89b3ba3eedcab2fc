#!/bin/bash
# The cluster churn run of docs/cluster.md: on the SLURM test's one-node cluster
# (tests/slurm_check.sh, root), 4 peers on Fashion-MNIST under deploy/slurm/gossip.sbatch, once
# as they are and once with peer 2 crashing itself at 30% of training (gossip-peer --churn) and
# the sbatch loop restarting it from its checkpoint. Prints each run's final accuracy, the
# crash's detection and resume from the report's churn section, and the difference.
#   usage: scripts/experiments/slurm-churn.sh BUILD_DIR [EPOCHS]      (default 5 epochs)
set -euo pipefail
BUILD=$(realpath "${1:?usage: slurm-churn.sh BUILD_DIR [EPOCHS]}")
EPOCHS=${2:-5}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d /tmp/gt-slurm-churn.XXXXXX)
SCEN=$OUT/crash.json
echo '{"events": [{"at_progress": 0.3, "event": "crash", "peers": [2]}]}' >"$SCEN"
FLAGS=(--epochs "$EPOCHS" --checkpoint-every 5 --seed 1)
echo "slurm-churn: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), epochs $EPOCHS"
bash "$SRC/tests/slurm_check.sh" "$BUILD/apps" "$SRC" "${FLAGS[@]}" >"$OUT/plain.log" 2>&1 ||
  { tail -30 "$OUT/plain.log"; exit 1; }
echo "slurm-churn: plain run done, load $(cut -d' ' -f1-3 /proc/loadavg)"
GT_RESTART_DELAY=${GT_RESTART_DELAY:-15} GT_SLURM_CHURN=$SCEN \
  bash "$SRC/tests/slurm_check.sh" "$BUILD/apps" "$SRC" "${FLAGS[@]}" --churn "$SCEN" \
  >"$OUT/crash.log" 2>&1 || { tail -40 "$OUT/crash.log"; exit 1; }
echo "slurm-churn: crash run done, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT/plain.log" "$OUT/crash.log" <<'PY'
import json, sys
def result(path):
    for line in open(path):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    sys.exit(f"no RESULT line in {path}")
plain, crash = result(sys.argv[1]), result(sys.argv[2])
e = [x for x in crash["churn"]["events"] if x["kind"] == "crash"][0]
d = 100 * (crash["final_test_acc_mean"] - plain["final_test_acc_mean"])
print(f"plain: final acc mean {100 * plain['final_test_acc_mean']:.2f}% min "
      f"{100 * plain['final_test_acc_min']:.2f}% in {plain['seconds']:.0f} s")
print(f"crash: final acc mean {100 * crash['final_test_acc_mean']:.2f}% min "
      f"{100 * crash['final_test_acc_min']:.2f}% in {crash['seconds']:.0f} s")
print(f"crash of peer {e['peer']} at {e['t']:.1f} s: detected by "
      + ", ".join(f"peer {k} in {v:.1f} s" for k, v in e["detected_by_s"].items())
      + f"; back after {e['back_after_s']:.1f} s; swarm acc before {e['acc_before']}, "
      f"after {e['acc_after']}")
print(f"difference (crash - plain): {d:+.2f} points: "
      + ("within 1 point" if abs(d) <= 1.0 else "NOT within 1 point"))
sys.exit(0 if abs(d) <= 1.0 else 1)
PY
echo "slurm-churn: logs in $OUT"
