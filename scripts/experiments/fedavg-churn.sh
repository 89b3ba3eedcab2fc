#!/usr/bin/env bash
# The churn rows of issue 33: FedAvg and gossip on the same shards and budget, without churn, with
# 20% of the clients crashing and restarting at random (the random model: every client churns, at
# most 20% of them down at once), and FedAvg with its server crashed at 40% of the rounds and
# restarted 20 s later. Prints the --compare table and each run's server outage line.
# Env: BUILD (build), OUT (runs/fedavg-churn), PEERS (10), ROUNDS (10) FedAvg rounds of LOCAL (1)
# local epochs (gossip: ROUNDS x LOCAL epochs), MODEL (the default MLP), DATA (Fashion-MNIST; e.g.
# synthetic for a quick run), UPTIME (40), DOWNTIME (10), TARGET (0.80), NICE (10), BACKEND (cpu),
# EXTRA (more launch flags, split on spaces: e.g. NIID-Bench's "--batch 64 --lr 0.01 --momentum 0.9
# --schedule constant --partition iid"), ONLY (these runs of fedavg, fedavg-clientchurn,
# fedavg-servercrash, gossip, gossip-clientchurn; default all), PARALLEL (0; 1: all at once, each
# on ports of its own from BASE_PORT, default 20000), RUN_SECONDS (none; each run is stopped with
# SIGINT after this many seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/fedavg-churn}
PEERS=${PEERS:-10}
ROUNDS=${ROUNDS:-10}
LOCAL=${LOCAL:-1}
MODEL=${MODEL:-mlp:784-256-256-10}
DATA=${DATA:-}
TARGET=${TARGET:-0.80}
UPTIME=${UPTIME:-40}
DOWNTIME=${DOWNTIME:-10}
NICE=${NICE:-10}
L="$BUILD/apps/gossip-launch"
BACKEND=${BACKEND:-cpu}
ONLY=${ONLY:-fedavg fedavg-clientchurn fedavg-servercrash gossip gossip-clientchurn}
PARALLEL=${PARALLEL:-0}
COMMON=(--peers "$PEERS" --model "$MODEL" --backend "$BACKEND" --seed 1 --target-acc "$TARGET"
        --no-plots)
[[ -n $DATA ]] && COMMON+=(--data "$DATA")
# shellcheck disable=SC2206  # word splitting is the point
[[ -n ${EXTRA:-} ]] && COMMON+=(${EXTRA})
limit=()
[[ -n ${RUN_SECONDS:-} ]] && limit=(timeout --preserve-status -s INT -k 120 "$RUN_SECONDS")
# The same random schedule for both modes: FedAvg's clients are peers 1..N, gossip's 0..N-1.
list() { seq -s+ "$1" "$2"; }
RANDOM_CHURN="random:crash,uptime=$UPTIME,downtime=$DOWNTIME,max_down=0.2,seed=1"
mkdir -p "$OUT"
runs=()
port=${BASE_PORT:-20000}
run() {  # run NAME ARGS...
  local dir="$OUT/$1"
  [[ " $ONLY " == *" $1 "* ]] || return 0
  shift
  rm -rf "$dir"
  runs+=("$dir")
  local ports=()
  if [[ $PARALLEL == 1 ]]; then ports=(--base-port "$port"); port=$((port + 100)); fi
  echo "fedavg-churn: $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $dir: $*" >&2
  local cmd=("${limit[@]}" nice -n "$NICE" "$L" "${COMMON[@]}" "$@" "${ports[@]}" --out "$dir")
  if [[ $PARALLEL == 1 ]]; then
    "${cmd[@]}" > "$dir.log" 2>&1 &
  else  # 130: stopped by RUN_SECONDS
    "${cmd[@]}" > "$dir.log" 2>&1 || echo "fedavg-churn: $dir exited $?, see $dir.log" >&2
  fi
}
FA=(--mode fedavg --rounds "$ROUNDS" --local-epochs "$LOCAL")
GO=(--mode gossip --epochs $((ROUNDS * LOCAL)))
run fedavg "${FA[@]}"
run fedavg-clientchurn "${FA[@]}" --churn "$RANDOM_CHURN,peers=$(list 1 "$PEERS")"
run fedavg-servercrash "${FA[@]}" --churn "crash:0@40%/20"
run gossip "${GO[@]}"
run gossip-clientchurn "${GO[@]}" --churn "$RANDOM_CHURN,peers=$(list 0 $((PEERS - 1)))"
[[ $PARALLEL == 1 ]] && wait
"$L" --compare "${runs[@]}" --markdown
for r in "${runs[@]}"; do
  grep -h "FedAvg server\|^final test acc" "$r.log" | sed "s|^|$(basename "$r"): |" || true
done
