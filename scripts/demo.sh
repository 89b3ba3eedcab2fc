#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs a 4-peer gossip training run on
# Fashion-MNIST on this machine (backend chosen automatically), ending with the summary table and
# the path of the plots. Extra arguments go to gossip-launch (e.g. --epochs 3, --partition shards:2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target programs   # everything `cmake --install` copies
OUT=${OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
"$BUILD/apps/gossip-launch" --peers 4 --mode gossip --backend auto --epochs 10 \
  --data /usr/share/datasets/fashion-mnist --partition iid --out "$OUT" "$@"
echo
"$BUILD/apps/gossip-launch" --compare "$OUT"
# Every plot the run folder holds (scripts/plot/plot_run.py's), or where to look when there is none.
shopt -s nullglob
plots=("$OUT"/*.png)
if ((${#plots[@]})); then
  echo "plots: ${plots[*]}"
else
  echo "plots: none made (summary.json's \"plots\" says why; $OUT/plot.log)"
fi
