#!/usr/bin/env bash
# NIID-Bench's setting (scripts/experiments/niid-bench.sh) on a lent GPU machine, inside one time budget: the
# four partitions, FedAvg and gossip, all eight runs at once on GPU 0 (80 training processes and
# 4 servers time-sharing it), each stopped with SIGINT when the budget is spent, so each reaches
# as many rounds / epochs as fit (the table and curves say how many).
#
# Prepared here (a machine with nvcc and our Debian packages), then carried:
#   scripts/fetch-device-deps.sh .deps && tar -cJf .devcarry/deps.tar.xz .deps
#   GT_STAGES=build CUDA_ARCHS=90 GT_DEVICE_BUILD_DIR=build-device \
#     GT_BUILD_TARGETS="gossip-peer gossip-launch test_kernels" scripts/device-check.sh .deps
#   scripts/experiments/niid-device.sh --pack   (copies the three programs and the CUDA module into .devcarry)
#   cp /usr/share/datasets/fashion-mnist/* .devcarry/data/
# There: scripts/experiments/niid-device.sh   (carry .devcarry; .git/info/exclude ignores it)
# The programs' RPATH points into /work/main/.deps (where they were linked): where the checkout
# lies elsewhere, /work/main is made a link to it. If they do not run there (a missing library, a
# [cuda] test failing), they are built there instead (scripts/device-check.sh, a fresh folder).
# Env: JOB (niid; churn: the churn rows, see below), GT_CUDA_WAIT (yield), MPS (1), FEDAVG_SHARE (55: FedAvg's percent of the time left),
# BUDGET_S (480: seconds from this script's start until every run is stopped, plus about
# 60 s to stop them and pack), OUT (runs/niid-device), ROUNDS (50), E (10), PARTS, MODES (as
# niid-bench.sh), BACKEND (cuda; cpu for a dry run on a machine without a GPU).
# Leaves OUT/table.md, OUT/fedavg.tar.xz (FedAvg's run folders: logs, metrics, summaries; and this
# script's logs), OUT/gossip-PART.tar.xz (each gossip run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
CARRY=.devcarry
t0=$SECONDS
log() { echo "niid-device: $(date -u +%T) +$((SECONDS - t0)) s: $*"; }

if [[ "${1:-}" == --pack ]]; then
  rm -rf "$CARRY/build-device"
  mkdir -p "$CARRY/build-device/apps" "$CARRY/build-device/lib/gossiptrain" \
    "$CARRY/build-device/tests"
  cp build-device/apps/gossip-peer build-device/apps/gossip-launch "$CARRY/build-device/apps/"
  cp build-device/lib/gossiptrain/*.so "$CARRY/build-device/lib/gossiptrain/"
  cp build-device/tests/test_kernels "$CARRY/build-device/tests/"
  strip --strip-unneeded "$CARRY"/build-device/apps/* "$CARRY"/build-device/tests/*
  du -sh "$CARRY"/*
  exit 0
fi

BUDGET_S=${BUDGET_S:-480}
OUT=${OUT:-runs/niid-device}
BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT"
runs="$OUT/runs"
rm -rf "$runs"

log "$(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; load $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'

[[ -d .deps ]] || tar -xJf "$CARRY/deps.tar.xz" || { log "no .deps"; exit 2; }
if [[ "$PWD" != /work/main && ! -e /work/main ]]; then
  mkdir -p /work && ln -s "$PWD" /work/main
fi
BUILD="$CARRY/build-device"
# MPS (MPS=1, the default with BACKEND=cuda): one server context runs the 84 processes' kernels
# side by side, where without it the GPU switches between 84 contexts (8 MLP peers on one H100 made
# 520 steps/s together, one alone 2,340). Quit at the end; without it if it does not start.
mps=0
if [[ $BACKEND == cuda && ${MPS:-1} == 1 ]] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/gt-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/gt-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && mps=1
fi
stop_mps() {
  ((mps)) && { echo quit | nvidia-cuda-mps-control; log "MPS quit"; mps=0; }
}
trap stop_mps EXIT
# 44 processes on 16 cores: a thread that waits for the GPU yields its core (GT_CUDA_WAIT).
export GT_CUDA_WAIT=${GT_CUDA_WAIT:-yield}
log "MPS: $mps; GT_CUDA_WAIT=$GT_CUDA_WAIT"

ok=1
missing() { ldd "$BUILD/apps/gossip-peer" "$BUILD/lib/gossiptrain/"*.so | grep 'not found'; }
if missing >/dev/null; then  # CUDA's libraries elsewhere than where they were linked
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    f=$(find /usr/local /usr/lib /opt -name "$lib" 2>/dev/null | head -1)
    if [[ -n "$f" ]]; then
      LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export LD_LIBRARY_PATH
    fi
  done
  log "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
fi
if missing; then ok=0; fi
# The [cuda] tests: a failing test is reported (test_cuda.log) and the runs go on; programs that
# cannot start (Catch's summary missing, or no device seen) are built here instead.
cuda_tests() {
  timeout 120 "$BUILD/tests/test_kernels" "[cuda]" > "$OUT/test_cuda.log" 2>&1
  log "the [cuda] tests: exit $?; $(grep -E '^(All tests passed|test cases:)' "$OUT/test_cuda.log" | head -1)"
  grep -qE '^(All tests passed|test cases:)' "$OUT/test_cuda.log" &&
    ! grep -q "no CUDA device" "$OUT/test_cuda.log"
}
if ((ok)) && [[ $BACKEND == cuda ]]; then
  cuda_tests || ok=0
  if ((!ok && mps)); then  # MPS's fault, or the programs'? Once more without it.
    cat /tmp/gt-mps-log/*.log 2>/dev/null | tail -5
    stop_mps; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    ok=1
    cuda_tests || ok=0
  fi
fi
if ((!ok)); then
  log "the carried programs do not run here: building (scripts/device-check.sh)"
  GT_STAGES=build GT_DEVICE_BUILD_DIR=build-device-here CUDA_ARCHS=90 \
    GT_BUILD_TARGETS="gossip-peer gossip-launch" OUT="$OUT/build" \
    bash scripts/device-check.sh .deps > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  BUILD=build-device-here
fi
log "programs: $BUILD"

# The GPU's memory and use, and the load, every 20 s while the runs go.
(while sleep 20; do
   echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>&1)"
 done) > "$OUT/gpu.log" 2>&1 &
sampler=$!

PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
left() { echo $((BUDGET_S - (SECONDS - t0))); }
CNN=cnn:28x28x1-c6k5-p2-c16k5-p2-f120-f84-10
if [[ ${JOB:-niid} == churn ]]; then
  # The churn rows in NIID-Bench's setting (iid): FedAvg with 20% of its clients crashing and
  # restarting at random, FedAvg with its server crashed at 40% and back 20 s later, gossip with
  # the same client churn; ROUNDS (20) rounds of E local epochs, gossip ROUNDS x E epochs. The
  # runs without churn are the niid job's (their first ROUNDS rounds).
  churn_s=$(( $(left) - 40 ))
  log "churn rows, all at once, each stopped after $churn_s s"
  BUILD="$BUILD" OUT="$runs" BACKEND="$BACKEND" DATA="${DATA:-$CARRY/data}" PARALLEL=1 NICE=0 \
    RUN_SECONDS="$churn_s" ROUNDS="${ROUNDS:-20}" LOCAL="${E:-10}" MODEL="${MODEL:-$CNN}" \
    UPTIME="${UPTIME:-30}" DOWNTIME="${DOWNTIME:-10}" \
    EXTRA="--batch 64 --lr 0.01 --momentum 0.9 --schedule constant --partition iid" \
    ONLY="fedavg-clientchurn fedavg-servercrash gossip-clientchurn" \
    bash scripts/experiments/fedavg-churn.sh 2>&1 | tee "$OUT/table.md"
else
  # Two phases, each all partitions at once: FedAvg (40 clients and 4 servers: under MPS's client
# limit), then gossip for as many epochs per peer as FedAvg's clients trained in each partition
# (rounds completed x E), so that the table compares the same local epochs.
common=(BUILD="$BUILD" OUT="$runs" BACKEND="$BACKEND" DATA="${DATA:-$CARRY/data}" PARALLEL=1
        NICE=0 E="${E:-10}" TABLE=0)
PARTS=${PARTS:-iid dirichlet:0.5 classes:2 classes:3}
fed_s=$(( $(left) * ${FEDAVG_SHARE:-55} / 100 ))
((fed_s < 60)) && { log "only $(left) s left of BUDGET_S=$BUDGET_S"; kill "$sampler"; exit 1; }
log "phase 1: FedAvg, every partition at once, each stopped after $fed_s s"
env "${common[@]}" RUN_SECONDS="$fed_s" ROUNDS="${ROUNDS:-50}" MODES=fedavg PARTS="$PARTS" \
  bash scripts/experiments/niid-bench.sh
port=30000
pids=()
for part in $PARTS; do
  r=$(grep -c '"event":"eval".*"round"' "$runs/fedavg-${part/:/}/peer0/metrics.jsonl" 2>/dev/null)
  r=${r:-0}
  ((r < 1)) && r=1
  gossip_s=$(( $(left) - 30 ))
  log "phase 2: gossip on $part, $r x ${E:-10} epochs per peer (FedAvg's rounds), stopped after $gossip_s s"
  env "${common[@]}" RUN_SECONDS="$gossip_s" ROUNDS="$r" MODES=gossip PARTS="$part" \
    BASE_PORT=$port bash scripts/experiments/niid-bench.sh &
  pids+=($!)
  port=$((port + 1000))
done
wait "${pids[@]}"
$PY scripts/experiments/niid_table.py "$runs" --epochs-per-round "${E:-10}" | tee "$OUT/table.md"
fi
kill "$sampler" 2>/dev/null
stop_mps
log "done; packing"
# At most 8 files come back from the device, 16 MiB each: FedAvg's runs with the logs in one
# archive, each gossip run in its own (the peers' metrics lines grow with their exchanges).
mv "$OUT"/*.log "$runs/" 2>/dev/null
for f in /tmp/gt-mps-log/*.log; do [[ -f $f ]] && cp "$f" "$runs/mps-$(basename "$f")"; done
x=(--exclude='*.safetensors' --exclude=ckpt --exclude='*.key')
mapfile -t fed < <(cd "$runs" && ls -d fedavg-* ./*.log)
tar -cJf "$OUT/fedavg.tar.xz" "${x[@]}" -C "$runs" "${fed[@]}"
for d in "$runs"/gossip-*/; do
  d=$(basename "$d")
  tar -cJf "$OUT/$d.tar.xz" "${x[@]}" -C "$runs" "$d" "$d.log"
done
rm -rf "$runs"
ls -la "$OUT"
