#!/usr/bin/env bash
# The partner schedule against the weighted draw in gossip-sim's consensus workload (issue 47):
# 1,000 peers, exchange rounds (n/2 exchanges each) until the spread is 1e-6 of the initial one,
# without churn and with 10% random churn (a peer is down a tenth of the time: mean uptime 90 s,
# downtime 10 s, from 30 s on). Prints one line per run from its summary.json.
#   scripts/experiments/schedule_sim.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build}
out=${2:-runs/schedule-sim}
mkdir -p "$out"
peers=${PEERS:-1000}
secs=${SECS:-90}
for churn in none 10pct; do
  for choice in weighted hypercube; do
    dir="$out/$choice-$churn"
    rm -rf "$dir"
    args=(--peers "$peers" --workload consensus --sim-seconds "$secs" --params 1000 --seed 1
          --sample-every 0.25 --partner-choice "$choice" --out "$dir")
    [[ $churn == 10pct ]] && args+=(--churn random:crash,uptime=90,downtime=10,start=30,seed=1)
    nice -n 15 "$build/apps/gossip-sim" "${args[@]}" > "$dir.log" 2>&1 || { echo "$dir failed"; tail -3 "$dir.log"; continue; }
    /usr/bin/python3 - "$dir/summary.json" "$choice" "$churn" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
r = s.get("spread_1e-6")
a = s.get("spread_1e-6_after_converged")
conv = s.get("membership", {}).get("converged_s")
print(f"{sys.argv[2]:9s} churn={sys.argv[3]:5s} rounds_to_1e-6="
      f"{'never' if r is None else '%.2f' % r['rounds']} at_t="
      f"{'-' if r is None else '%.2f' % r['t']} s; from convergence: "
      f"{'never' if a is None else '%.2f rounds (t %.2f -> %.2f)' % (a['rounds'], a['from_t'], a['t'])}, membership converged at {conv} s, "
      f"msd {s['msd_initial']:.3g} -> {s['msd_final']:.3g}, exchanges ok {s['exchanges_ok']}, "
      f"failed sides {s['exchange_sides_failed']}")
PY
  done
done
