#!/usr/bin/env bash
# The README's experiment table: 8 peers, mlp:784-256-256-10, 10 epochs, CPU backend, Fashion-MNIST;
# gossip vs local for iid, dirichlet:0.1 and shards:2, and one central peer. Prints the Markdown
# table at the end. Takes about 4 minutes on 2 cores. BUILD and OUT choose the folders.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${OUT:-runs/table}
L="$BUILD/apps/gossip-launch"
mkdir -p "$OUT"
runs=()
for part in iid dirichlet:0.1 shards:2; do
  for mode in gossip local; do
    dir="$OUT/$mode-${part/:/}"
    rm -rf "$dir"
    "$L" --peers 8 --mode "$mode" --partition "$part" --backend cpu --epochs 10 --seed 1 \
      --out "$dir" > "$dir.log" 2>&1 || echo "experiments: $mode $part failed, see $dir.log"
    runs+=("$dir")
  done
done
rm -rf "$OUT/central"
"$L" --mode central --backend cpu --epochs 10 --seed 1 --out "$OUT/central" > "$OUT/central.log" 2>&1 ||
  echo "experiments: central failed, see $OUT/central.log"
runs+=("$OUT/central")
"$L" --compare "${runs[@]}" --markdown
