#!/usr/bin/env bash
# The runs issue 13 asks for, each a plain gossip-launch command (Fashion-MNIST, CPU backend unless
# BACKEND says otherwise, 10 epochs, seed 1): the FedAvg CNN on one peer and on 8 gossip peers
# (iid, dirichlet:0.1, shards:2), and the MLP with --optimizer qgm against SGD momentum on 8 peers
# for the same partitions, REPEAT times each (repeat r with --seed r: its own partition, initial
# weights and batch order). Prints the Markdown table (--compare) at the end.
# Env: BUILD (build), OUT (runs/cnn), BACKEND (cpu), REPEAT (1), ONLY (cnn|qgm: one half).
# Slow on 2 cores: the CNN costs about 20 times the MLP's step (gossip-bench train), so its
# one-peer run alone is tens of minutes there; a quiet machine with more cores, or the GPU, helps.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/cnn}
BACKEND=${BACKEND:-cpu}
REPEAT=${REPEAT:-1}
ONLY=${ONLY:-}
L="$BUILD/apps/gossip-launch"
CNN=cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10
mkdir -p "$OUT"
runs=()
run() {  # run NAME SEED ARGS...: one gossip-launch run into $OUT/NAME
  local dir="$OUT/$1" seed=$2
  shift 2
  rm -rf "$dir"
  echo "cnn-experiments: $dir: $L $* --backend $BACKEND --epochs 10 --seed $seed --no-plots" >&2
  "$L" "$@" --backend "$BACKEND" --epochs 10 --seed "$seed" --no-plots --out "$dir" > "$dir.log" 2>&1 ||
    echo "cnn-experiments: $dir failed, see $dir.log" >&2
  runs+=("$dir")
}
if [[ "$ONLY" != qgm ]]; then
  run cnn-central 1 --mode central --model "$CNN"
  for part in iid dirichlet:0.1 shards:2; do
    run "cnn-gossip-${part/:/}" 1 --peers 8 --partition "$part" --model "$CNN"
  done
fi
if [[ "$ONLY" != cnn ]]; then
  for r in $(seq 1 "$REPEAT"); do
    for part in iid dirichlet:0.1 shards:2; do
      for opt in qgm sgd; do
        run "mlp-$opt-${part/:/}-r$r" "$r" --peers 8 --partition "$part" --optimizer "$opt"
      done
    done
  done
fi
"$L" --compare "${runs[@]}" --markdown
