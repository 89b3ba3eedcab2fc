#!/bin/bash
# The low-communication benchmark of docs/communication.md (issue 34): Fashion-MNIST, 8 peers,
# 10 epochs, today's default against --comm-preset low, run back to back on the same machine, on
# loopback, with every peer's link capped (gossip-launch --netns and a `link` churn event on all
# peers at t = 0: tc tbf), and on dirichlet:0.1. Prints the table, the load average before each
# run and the command of each.
#
# usage: scripts/experiments/comm_bench.sh OUT_DIR [SET...]
#   SET: loopback (default), capped (10 Mbit/s, root), dirichlet, or all. Extra flags for every
#   run in BENCH_FLAGS (e.g. BENCH_FLAGS="--epochs 2" for a quick try), a cap in CAP_MBIT (10).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
launch="${LAUNCH:-$root/build/apps/gossip-launch}"
out="${1:?usage: comm_bench.sh OUT_DIR [loopback|capped|dirichlet|all]...}"
shift
sets=("$@")
[ ${#sets[@]} -eq 0 ] && sets=(loopback)
[ "${sets[0]}" = all ] && sets=(loopback capped dirichlet)
cap="${CAP_MBIT:-10}"
[ -x "$launch" ] || { echo "comm_bench.sh: no $launch (build first)" >&2; exit 2; }
mkdir -p "$out"
common=(--peers 8 --epochs 10 --seed 1 --no-plots ${BENCH_FLAGS:-})

run() {  # name, flags...
  local name="$1"
  shift
  if [ -f "$out/$name/summary.json" ]; then
    echo "== $name: done before, kept" >&2
    return
  fi
  rm -rf "${out:?}/$name"
  echo "== $name: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" | tee -a "$out/loads.txt" >&2
  echo "$name: $launch ${common[*]} $* --out $out/$name" >> "$out/commands.txt"
  "$launch" "${common[@]}" "$@" --out "$out/$name" > "$out/$name.log" 2>&1 ||
    echo "== $name: gossip-launch exited $? (see $out/$name.log)" >&2
}

for s in "${sets[@]}"; do
  case "$s" in
    loopback)
      run default-loopback
      run low-loopback --comm-preset low ;;
    capped)
      peers=$(seq -s, 0 7)
      printf '{"events": [{"at": 0, "event": "link", "peers": [%s], "rate_mbit": %s}]}\n' \
        "$peers" "$cap" > "$out/cap.json"
      run "default-${cap}mbit" --netns --churn "$out/cap.json"
      run "low-${cap}mbit" --netns --churn "$out/cap.json" --comm-preset low ;;
    dirichlet)
      run default-dirichlet --partition dirichlet:0.1
      run low-dirichlet --partition dirichlet:0.1 --comm-preset low ;;
    *) echo "comm_bench.sh: unknown set '$s' (loopback, capped, dirichlet, all)" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 "$here/comm_table.py" "$out"
