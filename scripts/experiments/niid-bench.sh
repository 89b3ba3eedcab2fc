#!/usr/bin/env bash
# NIID-Bench's Fashion-MNIST setting (Li et al., ICDE 2022; Flower's niid_bench baseline) with our
# FedAvg and with gossip, on the same shards, model and total local epochs per peer (issue 33):
# 10 parties, their CNN (two 5x5 convolutions of 6 and 16 channels, max-pool 2, dense 120 and 84;
# ours pads the convolutions to "same" where theirs use none: see docs/fedavg.md), batch 64, SGD
# lr 0.01 momentum 0.9 (constant), E local epochs per round, for IID, dirichlet:0.5, classes:2 and
# classes:3. Gossip runs ROUNDS x E epochs per peer. Prints the table (scripts/experiments/niid_table.py).
# Env: BUILD (build), OUT (runs/niid), ROUNDS (2), E (10), PARTS ("iid dirichlet:0.5 classes:2
# classes:3"), MODES ("fedavg gossip"), SEED (1), TARGET (0.80), NICE (10), BACKEND (cpu; cuda
# puts every peer of every run on GPU 0), DATA (the Fashion-MNIST folder; the peers' default),
# PARALLEL (0; 1 runs every partition and mode at once), RUN_SECONDS (none; each run is stopped
# with SIGINT after this many seconds, as Ctrl-C would: its summary says "interrupted", and the
# table gives the rounds and epochs it reached), BASE_PORT (20000; with PARALLEL=1 run k listens on
# BASE_PORT + 100 k and up), TABLE (1; 0: no table at the end).
# Their 50 rounds x 10 epochs are 500 epochs over all of Fashion-MNIST per partition: days on a
# shared 2-core machine; ROUNDS says how many we ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/niid}
ROUNDS=${ROUNDS:-2}
E=${E:-10}
PARTS=${PARTS:-iid dirichlet:0.5 classes:2 classes:3}
MODES=${MODES:-fedavg gossip}
SEED=${SEED:-1}
TARGET=${TARGET:-0.80}
NICE=${NICE:-10}
BACKEND=${BACKEND:-cpu}
PARALLEL=${PARALLEL:-0}
RUN_SECONDS=${RUN_SECONDS:-}
L="$BUILD/apps/gossip-launch"
CNN=cnn:28x28x1-c6k5-p2-c16k5-p2-f120-f84-10
COMMON=(--peers 10 --model "$CNN" --batch 64 --lr 0.01 --momentum 0.9 --schedule constant
        --backend "$BACKEND" --seed "$SEED" --target-acc "$TARGET" --no-plots)
[[ -n "${DATA:-}" ]] && COMMON+=(--data "$DATA")
limit=()
[[ -n "$RUN_SECONDS" ]] && limit=(timeout --preserve-status -s INT -k 120 "$RUN_SECONDS")
run_one() {  # run_one DIR LAUNCH_ARGS...
  echo "niid-bench: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $1" >&2
  local rc=0
  "${limit[@]}" nice -n "$NICE" "$L" "${@:2}" --out "$1" > "$1.log" 2>&1 || rc=$?
  # 130: stopped by RUN_SECONDS (SIGINT), as planned; anything else is a failure.
  if ((rc != 0 && rc != 130)); then echo "niid-bench: $1 failed ($rc), see $1.log" >&2; fi
  echo "niid-bench: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): done $1" >&2
}
mkdir -p "$OUT"
job=0
for part in $PARTS; do
  for mode in $MODES; do
    dir="$OUT/$mode-${part/:/}"
    rm -rf "$dir"
    job=$((job + 1))
    if [[ $mode == fedavg ]]; then
      # A round of 10 local epochs of 10 clients on a loaded 2-core machine takes longer than the
      # default --round-timeout (600 s): every client would be dropped.
      args=(--mode fedavg --rounds "$ROUNDS" --local-epochs "$E" --round-timeout 86400)
    else
      args=(--mode gossip --epochs $((ROUNDS * E)))
    fi
    # Runs at once get ports of their own (20000 + 100 per run), never two picks of the same one.
    [[ $PARALLEL == 1 ]] && args+=(--base-port $((${BASE_PORT:-20000} + 100 * job)))
    if [[ $PARALLEL == 1 ]]; then
      run_one "$dir" "${COMMON[@]}" "${args[@]}" --partition "$part" &
    else
      run_one "$dir" "${COMMON[@]}" "${args[@]}" --partition "$part"
    fi
  done
done
wait
[[ ${TABLE:-1} == 1 ]] && /usr/bin/python3 scripts/experiments/niid_table.py "$OUT" --epochs-per-round "$E"
