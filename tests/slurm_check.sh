#!/bin/bash
# The SLURM system test (ctest scripts:slurm): a one-node SLURM cluster of our own (munged,
# slurmctld, slurmd from Debian's packages, config in a temporary folder), then docs/cluster.md's
# commands as the page writes them (read from the page by tests/doc_commands.py): the 8-task
# Fashion-MNIST job, then the churn example (its crash.json, a crash at 30% that the sbatch loop
# restarts). Changed only as a 2-core node needs: sbatch --wait --overcommit --output, and
# --epochs 2. For each it checks that every peer averaged with the others and finished,
# and that the job's gossip-launch --report wrote summary.json and the plots (and, for the churn
# job, the crash detected and the peer back). Beside them runs a 1-task job with a time limit of
# one minute that trains for ever: SLURM's time limit ends it, and the script's trap must still
# stop the peer with its checkpoint and write the report (ended_by SIGTERM). Every daemon it
# started is stopped by PID. Exit 77 (skip) where SLURM is not installed or does not start, or
# without Fashion-MNIST.
#   usage: slurm_check.sh BIN_DIR SOURCE_DIR [gossip-peer flags: one 4-task job of these instead]
# GT_SLURM_KEEP=1 keeps the temporary folder. GT_SLURM_CHURN=FILE checks the churn section of the
# flags' job (scripts/experiments/slurm-churn.sh uses it). GT_SLURM_SCANCEL=1 (ctest scripts:slurm_scancel) submits a
# long run, kills peer 1 with kill -9 (the peer loop restarts it), cancels the job with scancel
# once every peer has trained and checkpointed, and checks that the job's trap still ran the
# report: ended_by SIGTERM, each peer stopped with its checkpoint, peer 1 with one restart.
# GT_SLURM_RESIZE=1 (scripts:slurm_resize): a 4-task job cancelled after every peer's first epoch,
# resubmitted with 3 tasks on the same GT_RUN_DIR and GT_RUN_ID: the three go on from their epochs
# and finish, the report is OK (peer 3 "left (resized)"); then another GT_RUN_ID is refused.
# GT_SLURM_RESIZE_TO=N resubmits with N tasks instead of 3 (scripts:slurm_resize_up: 5, the new
# peer 4 starts at epoch 1 and finishes with the others).
set -uo pipefail
BIN=$(realpath "$1") SRC=$(realpath "$2")
shift 2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
# scancel JOB, then wait (at most 60 s) until it has left the queue.
cancel_and_wait() {
  scancel "$1" || fail "scancel $1"
  for _ in $(seq 120); do
    squeue -h -j "$1" 2>/dev/null | grep -q . || break
    sleep 0.5
  done
  squeue -h -j "$1" 2>/dev/null | grep -q . && fail "job $1 still in the queue 60 s after scancel"
}
# show_job OUT RUN_DIR: the job's output and the end of each task's log.
show_job() {
  echo "--- $1"; tail -30 "$1"
  for f in "$2"/peer*.log; do echo "--- $f"; tail -4 "$f"; done
}
[[ $(id -u) == 0 ]] || skip "needs root (munged, slurmd)"
for b in munged slurmctld slurmd sbatch sinfo; do
  command -v $b >/dev/null || skip "$b is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
done
[[ -r /etc/munge/munge.key ]] || skip "no /etc/munge/munge.key (the munge package makes it)"
id munge >/dev/null 2>&1 || skip "no munge user"
PY=/usr/bin/python3

TMP=$(mktemp -d /tmp/gt-slurm-$$.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
  local p i
  # The daemons last started first (slurmd, slurmctld, then munged itself before its runuser
  # parent, which reaps it), each waited for before the next.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    p=${PIDS[i]}
    kill "$p" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null
  done
  if [[ ${GT_SLURM_KEEP:-0} == 1 ]]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# munged as the munge user, on a socket of our own.
mkdir -p "$TMP/munge" && chown munge:munge "$TMP/munge" && chmod 755 "$TMP/munge"
SOCK=$TMP/munge/munge.sock
runuser -u munge -- munged -F --socket="$SOCK" --pid-file="$TMP/munge/munged.pid" \
  --log-file="$TMP/munge/munged.log" --seed-file="$TMP/munge/seed" >"$TMP/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.2; done
# munged's own PID after runuser's, so that it is stopped before runuser.
[[ -s $TMP/munge/munged.pid ]] && PIDS+=("$(cat "$TMP/munge/munged.pid")")
[[ -S $SOCK ]] || skip "munged did not start: $(tail -2 "$TMP/munged.out" "$TMP/munge/munged.log" 2>/dev/null | tr '\n' ' ')"

NODE=$(hostname -s)
PORT0=$((17000 + $$ % 2000))
mkdir -p "$TMP/state" "$TMP/spool"
cat >"$TMP/slurm.conf" <<CONF
ClusterName=gtlab
SlurmctldHost=$NODE
SlurmctldPort=$PORT0
SlurmdPort=$((PORT0 + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldLogFile=$TMP/ctld.log
SlurmdLogFile=$TMP/d.log
SlurmctldPidFile=$TMP/ctld.pid
SlurmdPidFile=$TMP/d.pid
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=30
NodeName=$NODE CPUs=$(nproc) RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
export SLURM_CONF=$TMP/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$TMP/ctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >"$TMP/d.out" 2>&1 &
PIDS+=($!)
up=0
for _ in $(seq 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^idle'; then up=1; break; fi
  sleep 0.5
done
((up)) || skip "SLURM did not start: $(sinfo -h 2>&1 | head -1); $(tail -3 "$TMP/ctld.log" "$TMP/d.log" 2>/dev/null | tr '\n' ' ')"
echo "slurm: node $NODE idle (slurmctld, slurmd and munged of this test; config $SLURM_CONF)"

# The job, as docs/cluster.md runs it.
cd "$TMP"
RUN=$TMP/run
export GT_RUN_DIR=$RUN GT_SCRIPTS_DIR=$SRC/scripts/plot GT_BASE_PORT=$((PORT0 + 10))
# As a user submits it after the README's two commands: no GT_BIN_DIR and no program on PATH, the
# script finds the checkout's build tree (where BIN is that tree; another build folder is named).
if [[ $(cd "$BIN" && pwd) != "$(cd "$SRC" && pwd)/build/apps" ]] || command -v gossip-peer >/dev/null; then
  export GT_BIN_DIR=$BIN
fi
if [[ ${GT_SLURM_SCANCEL:-0} == 1 ]]; then
  # A run far longer than the test: cancelled once every peer has written two checkpoints.
  export GT_RESTART_DELAY=1
  jid=$(sbatch --parsable --ntasks 4 --overcommit --output="$TMP/job.out" \
    "$SRC/deploy/slurm/gossip.sbatch" --data synthetic --epochs 500 --checkpoint-every 1) ||
    fail "sbatch refused the job"
  echo "job $jid submitted"
  ready=0
  for _ in $(seq 240); do
    n=0
    for i in 0 1 2 3; do
      steps=$(grep -c '"event":"checkpoint"' "$RUN/peer$i/metrics.jsonl" 2>/dev/null)
      [[ -n $(ls -A "$RUN/peer$i/ckpt" 2>/dev/null) ]] && ((${steps:-0} >= 2)) && n=$((n + 1))
    done
    ((n == 4)) && { ready=1; break; }
    sleep 0.5
  done
  ((ready)) || { tail -20 "$TMP/job.out" "$RUN"/peer*.log 2>/dev/null; fail "the peers did not train and checkpoint within 120 s"; }
  # First a death nobody scripted: peer 1's process killed -9 (found by its SLURM_PROCID and run
  # folder), which the peer loop restarts from its checkpoint after GT_RESTART_DELAY (1 s here).
  victim=
  for p in $(pgrep -x gossip-peer); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=1 &&
      grep -q "$RUN" "/proc/$p/cmdline" 2>/dev/null && victim=$p
  done
  [[ -n $victim ]] || fail "peer 1's process not found"
  kill -9 "$victim"
  echo "peer 1 (pid $victim) killed -9"
  back=0
  for _ in $(seq 120); do
    lives=$(grep -c '"event":"clock"' "$RUN/peer1/metrics.jsonl")
    ckpts=$(sed -n '/"event":"clock"/h; /"event":"clock"/!H; ${x;p}' "$RUN/peer1/metrics.jsonl" | grep -c '"event":"checkpoint"')
    ((lives >= 2 && ${ckpts:-0} >= 2)) && { back=1; break; }
    sleep 0.5
  done
  ((back)) || { tail -20 "$TMP/job.out" "$RUN"/peer1.log; fail "peer 1 was not restarted and checkpointing within 60 s"; }
  echo "every peer trained and checkpointed, peer 1 restarted: scancel $jid"
  cancel_and_wait "$jid"
  show_job "$TMP/job.out" "$RUN"
  grep -q "gossip.sbatch: SIGTERM" "$TMP/job.out" || fail "the job script did not trap SIGTERM"
  grep -q "FAILED: peer" "$TMP/job.out" || fail "the report did not name the stopped peers"
  "$PY" - "$RUN" <<'PYCANCEL' || fail "the cancelled run's checks"
import json, os, sys
run = sys.argv[1]
s = json.load(open(os.path.join(run, "summary.json")))
assert s["ended_by"] == "SIGTERM", s.get("ended_by")
assert s["num_peers"] == 4, s["num_peers"]
assert len(s["failed_peers"]) == 4, s["failed_peers"]
for p in s["peers"]:
    assert p["state"] == "stopped", f"peer {p['peer']}: {p['state']}"
    assert (p["steps"] or 0) > 0, f"peer {p['peer']}: no step"
    assert "from outside" in p["end"], p["end"]
    # Peer 1 was killed -9 and restarted: one restart, its time the sum of its two lives.
    assert p["restarts"] == (1 if p["peer"] == 1 else 0), (p["peer"], p["restarts"])
    assert len(p["life_seconds"]) == p["restarts"] + 1, p["life_seconds"]
    assert abs(p["seconds"] - sum(p["life_seconds"])) < 1e-6, p
    ckpt = os.path.join(run, f"peer{p['peer']}", "ckpt")
    assert os.listdir(ckpt), f"peer {p['peer']}: no checkpoint"
    lines = [json.loads(l) for l in open(os.path.join(run, f"peer{p['peer']}", "metrics.jsonl"))]
    done = [l for l in lines if l["event"] == "done"]
    assert done and done[-1].get("stopped") is True, f"peer {p['peer']}: no stopped done line"
    print(f"peer {p['peer']}: stopped at step {p['steps']}, {p['seconds']:.1f} s, ckpt {sorted(os.listdir(ckpt))}")
c = s["churn"]
assert c["applied"]["crash"] == 1 and c["applied"]["restart"] == 1, c["applied"]
table = open(os.path.join(run, "table.txt")).read()
assert "stopped (1 restart)" in table, table
print(table)
print("slurm scancel check: report ended_by", s["ended_by"], "; failed peers", len(s["failed_peers"]),
      "; peer 1 life_seconds", s["peers"][1]["life_seconds"])
PYCANCEL
  echo "slurm check: passed"
  exit 0
fi
if [[ ${GT_SLURM_RESIZE:-0} == 1 ]]; then
  # One run on 4 tasks cancelled part-way, resubmitted on the same GT_RUN_DIR and GT_RUN_ID with
  # GT_SLURM_RESIZE_TO tasks (default 3): the peers with a checkpoint go on from their epochs at
  # the new size, new ones catch up from one of them (its epoch, not 0), all finish; the report
  # is OK.
  TO=${GT_SLURM_RESIZE_TO:-3}
  export GT_RUN_ID=resize-check GT_RESTART_DELAY=1
  # A model big enough that an epoch takes a second or more (with mlp:784-64-10 a peer ran all six
  # epochs in 0.4 s on the 2-core machine under load, before the cancel reached it).
  RFLAGS=(--data synthetic --model mlp:784-1024-1024-10 --epochs 6 --checkpoint-every 1)
  jid=$(sbatch --parsable --ntasks 4 --overcommit --output="$TMP/job1.out" \
    "$SRC/deploy/slurm/gossip.sbatch" "${RFLAGS[@]}") || fail "sbatch refused the first job"
  echo "job $jid submitted (4 tasks)"
  # One poller, every 0.1 s for at most 120 s: the cancel must come soon after the slowest peer's
  # first epoch, while the others are still short of the last one.
  "$PY" - "$RUN" <<'PYWAIT' || { tail -20 "$TMP/job1.out" "$RUN"/peer*.log 2>/dev/null; fail "the 4 peers did not finish epoch 1 within 120 s"; }
import json, os, sys, time
run, deadline = sys.argv[1], time.monotonic() + 120
def epoch(i):
    e = 0
    try:
        for l in open(os.path.join(run, f"peer{i}", "metrics.jsonl")):
            try:
                j = json.loads(l)
            except ValueError:
                continue  # a line being written
            if j.get("event") == "eval": e = max(e, j.get("epoch", 0))
    except OSError:
        pass
    return e
while time.monotonic() < deadline:
    if all(epoch(i) >= 1 for i in range(4)): sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
PYWAIT
  cancel_and_wait "$jid"
  echo "job $jid cancelled after every peer's first epoch; resubmitting with $TO tasks"
  timeout 600 sbatch --wait --ntasks "$TO" --overcommit --output="$TMP/job2.out" \
    "$SRC/deploy/slurm/gossip.sbatch" "${RFLAGS[@]}"
  rc=$?
  show_job "$TMP/job2.out" "$RUN"
  ((rc == 0)) || fail "the resubmitted job's exit code $rc (its report)"
  grep -q "gossip.sbatch: run resize-check in $RUN, $TO task(s)" "$TMP/job2.out" || fail "the second job did not say its run and size"
  for ((i = 0; i < (TO < 4 ? TO : 4); i++)); do
    grep -q "was written with 4 shard(s)" "$RUN/peer$i.log" || fail "peer $i did not map its checkpoint from 4 shards"
  done
  "$PY" - "$RUN" "$TO" <<'PYRESIZE' || fail "the resized run's checks"
import json, os, sys
run, to = sys.argv[1], int(sys.argv[2])
s = json.load(open(os.path.join(run, "summary.json")))
assert s["failed_peers"] == [], s["failed_peers"]
assert len(s["peers"]) == max(4, to), len(s["peers"])
for p in s["peers"]:
    want = "left (resized)" if p["peer"] >= to else "done"
    assert p["state"] == want, (p["peer"], p["state"])
for i in range(4, to):  # new peers: one start, caught up with a peer that went on (not epoch 1)
    lines = [json.loads(l) for l in open(os.path.join(run, f"peer{i}", "metrics.jsonl"))]
    evals = [l["epoch"] for l in lines if l["event"] == "eval" and not l.get("final")]
    caught = [l for l in lines if l["event"] == "catch_up"]
    assert [l["num_shards"] for l in lines if l["event"] == "clock"] == [to]
    assert caught and caught[0]["ok"] and caught[0]["counters"], (i, caught)
    assert evals and evals[0] > 1 and evals[-1] == 6, (i, evals)
    print(f"peer {i}: new with {to} shards, caught up at step {caught[0]['step']}, "
          f"epochs {evals[0]} to {evals[-1]}")
for i in range(min(4, to)):
    lines = [json.loads(l) for l in open(os.path.join(run, f"peer{i}", "metrics.jsonl"))]
    clocks = [k for k, l in enumerate(lines) if l["event"] == "clock"]
    assert len(clocks) == 2, f"peer {i}: {len(clocks)} starts"
    assert lines[clocks[0]]["num_shards"] == 4 and lines[clocks[1]]["num_shards"] == to
    assert lines[clocks[1]]["run_id"] == "resize-check", lines[clocks[1]]
    before = [l["epoch"] for l in lines[:clocks[1]] if l["event"] == "checkpoint"][-1]
    assert before < 6, f"peer {i} finished all 6 epochs before the cancel reached it: the test was too slow"
    evals = [l["epoch"] for l in lines[clocks[1]:] if l["event"] == "eval" and not l.get("final")]
    assert evals and evals[0] == before + 1 and evals[-1] == 6, (i, before, evals)
    print(f"peer {i}: stopped at epoch {before} of 4 shards, went on with {to} from epoch {evals[0]} to {evals[-1]}")
print(f"slurm resize check: 4 -> {to} tasks, report ok; peer 3:", s["peers"][3]["end"] or s["peers"][3]["state"])
PYRESIZE
  # Another run id on the same folder: every peer refuses, naming both ids.
  GT_RUN_ID=another timeout 300 sbatch --wait --ntasks "$TO" --overcommit --output="$TMP/job3.out" \
    "$SRC/deploy/slurm/gossip.sbatch" "${RFLAGS[@]}" && fail "a job of another run id on the folder succeeded"
  grep -q "belongs to run 'resize-check', not to this run 'another'" "$RUN/peer0.log" || fail "no refusal naming both run ids"
  echo "slurm check: passed"
  exit 0
fi
# check_run RUN_DIR TASKS [CHURN]: every peer finished and averaged with the others; the report
# wrote the summary and the plots; with CHURN, the crash was detected and the peer came back.
check_run() {
  "$PY" - "$1" "$2" "${3:-}" <<'PYCHECK' || fail "the checks of the run in $1"
import json, os, sys
run, n, churn = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = json.load(open(os.path.join(run, "summary.json")))
assert s["num_peers"] == n, f"{s['num_peers']} peers in summary.json, not {n}"
assert s["failed_peers"] == [] and s["ended_by"] is None, (s["failed_peers"], s["ended_by"])
assert s["report"]["skipped"] == [] or churn, s["report"]["skipped"]
for p in s["peers"]:
    assert p["state"] == "done", f"peer {p['peer']}: {p['state']}"
    assert p["restarts"] == 0 or churn, f"peer {p['peer']}: {p['restarts']} restarts"
    assert (p.get("exchanges_ok") or 0) > 0, f"peer {p['peer']}: no exchange"
# With the others: each peer's exchanges name at least two partners (a swarm, not a pair).
for i in range(n):
    partners = set()
    for line in open(os.path.join(run, f"peer{i}", "metrics.jsonl")):
        j = json.loads(line)
        if j.get("event") == "exchange" and j.get("ok", True):
            partners.add(j.get("partner"))
    assert len(partners) >= 2, f"peer {i} averaged with {len(partners)} partner(s) only"
assert s["plots"]["ok"], s["plots"]
for png in ("accuracy.png", "loss.png", "bytes.png"):
    assert os.path.getsize(os.path.join(run, png)) > 1000, png
print(f"slurm check: {n} peers done, each averaged with >= 2 partners; final acc mean",
      s["final_test_acc_mean"], "; plots:", s["plots"]["message"])
if churn:
    c = s.get("churn")
    assert c, "no churn section"
    crashes = [e for e in c["events"] if e["kind"] == "crash"]
    assert crashes, "no crash in the churn section"
    for e in crashes:
        assert e["detected_by_s"], f"crash of peer {e['peer']} detected by nobody"
        assert e["back_after_s"] is not None, f"peer {e['peer']} never came back"
        print(f"crash of peer {e['peer']}: detected by {e['detected_by_s']}, back after {e['back_after_s']} s")
print("RESULT " + json.dumps({"final_test_acc_mean": s["final_test_acc_mean"],
                              "final_test_acc_min": s["final_test_acc_min"],
                              "seconds": s["seconds"], "churn": s.get("churn")}))
PYCHECK
}

if (($# > 0)); then
  # scripts/experiments/slurm-churn.sh: one 4-task job of the given flags.
  timeout 600 sbatch --wait --ntasks 4 --overcommit --output="$TMP/job.out" \
    "$SRC/deploy/slurm/gossip.sbatch" "$@"
  rc=$?
  show_job "$TMP/job.out" "$RUN"
  ((rc == 0)) || fail "sbatch --wait exit code $rc"
  grep -q "gossip.sbatch: programs from $(cd "$BIN" && pwd)" "$TMP/job.out" || fail "the job did not run the programs of $BIN"
  check_run "$RUN" 4 "${GT_SLURM_CHURN:-}"
  echo "slurm check: passed"
  exit 0
fi

[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  skip "no Fashion-MNIST in /usr/share/datasets/fashion-mnist (scripts/setup.sh installs dataset-fashion-mnist): docs/cluster.md's job trains on it"

# The time limit, beside the page's jobs: one task that would train for ever, a limit of one
# minute. SLURM ends it at the limit (slurmctld checks limits every 30 s or so) with SIGTERM to
# every process of the job, as scancel does: the trap must stop the peer with its checkpoint and
# write the report, ended_by SIGTERM.
# It and the page's jobs run at once on the one node, each on ports from its job id as a user's
# jobs are (no GT_BASE_PORT): two jobs on one node must not collide (they did when every job's
# base port was 7000: the second's peers exited 2). Only this test of the suite's SLURM tests
# takes ports from job ids, so the suite's other SLURM clusters (job ids from 1 too) do not meet it.
unset GT_BASE_PORT
tl_jid=$(GT_RUN_DIR=$TMP/run-tl sbatch --parsable --ntasks 1 --time 1 --output="$TMP/job-tl.out" \
  "$SRC/deploy/slurm/gossip.sbatch" --data synthetic --model mlp:784-64-10 --epochs 100000 \
  --checkpoint-every 50) || fail "sbatch refused the time-limit job"
tl_t0=$SECONDS
echo "time-limit job $tl_jid submitted (--time 1)"

# docs/cluster.md's commands, from the page, run from a submit folder that holds the checkout's
# deploy/ and build/ (as at the repository's root, where the page's relative paths start), so the
# script finds the build tree next to itself as it does for a user after the README's commands.
DOC=$SRC/docs/cluster.md
ln -s "$SRC/deploy" "$TMP/deploy"
[[ -e $TMP/build ]] || ln -s "$(dirname "$BIN")" "$TMP/build"
doc_cmd() { "$PY" "$SRC/tests/doc_commands.py" get "$DOC" "$1" || fail "docs/cluster.md: no single command starting with '$1'"; }
# The page's command -> what this node runs: sbatch waits (--wait) and may overcommit the 2 cores
# (the page says so for a node with fewer CPUs than tasks), and the epochs are cut to 2.
adapt() { sed -E "s|^sbatch |timeout 600 sbatch --wait --overcommit --output=$2 |; s/--epochs +[0-9]+/--epochs 2/" <<<"$1"; }
run_doc() {  # run_doc PREFIX OUT RUN_DIR [env...]: one command of the page
  local typed
  typed=$(adapt "$(doc_cmd "$1")" "$2") || exit 1
  echo "docs/cluster.md: $typed"
  (cd "$TMP" && env GT_RUN_DIR="$3" "${@:4}" bash -c "$typed")
}
run_doc "sbatch --ntasks 8 deploy/slurm/gossip.sbatch" "$TMP/job.out" "$RUN"
rc=$?
show_job "$TMP/job.out" "$RUN"
((rc == 0)) || fail "docs/cluster.md's sbatch job: exit code $rc"
from=$(sed -n 's/^gossip.sbatch: programs from //p' "$TMP/job.out" | head -1)
[[ -n $from && $(realpath "$from") == "$(realpath "$BIN")" ]] || fail "the job ran the programs of '$from', not of $BIN"
check_run "$RUN" 8

crash_line=$(doc_cmd "echo '{\"events\"") || exit 1
echo "docs/cluster.md: $crash_line"
(cd "$TMP" && bash -c "$crash_line") || fail "the page's echo line"
[[ -s $TMP/crash.json ]] || fail "the page's echo line made no crash.json"
run_doc "sbatch --ntasks 4 deploy/slurm/gossip.sbatch --churn" "$TMP/job-churn.out" "$TMP/run-churn"
rc=$?
show_job "$TMP/job-churn.out" "$TMP/run-churn"
((rc == 0)) || fail "docs/cluster.md's churn job: exit code $rc"
check_run "$TMP/run-churn" 4 "$TMP/crash.json"

# The time-limit job: it ends by itself, at its limit.
for _ in $(seq 360); do
  squeue -h -j "$tl_jid" 2>/dev/null | grep -q . || break
  sleep 0.5
done
squeue -h -j "$tl_jid" 2>/dev/null | grep -q . && { cancel_and_wait "$tl_jid"; fail "the time-limit job was still in the queue $((SECONDS - tl_t0)) s after its submission"; }
show_job "$TMP/job-tl.out" "$TMP/run-tl"
echo "time-limit job left the queue $((SECONDS - tl_t0)) s after its submission"
tl_log=$(grep -iE "time limit.*JobId=$tl_jid\b|JobId=$tl_jid\b.*time limit" "$TMP/ctld.log") ||
  fail "slurmctld's log does not say job $tl_jid reached its time limit"
tail -2 <<<"$tl_log"
grep -q "gossip.sbatch: SIGTERM" "$TMP/job-tl.out" || fail "the time-limit job's script did not trap SIGTERM"
# Two jobs on one node at once, on different ports from their job ids.
"$PY" - "$TMP/run-tl" "$RUN" "$TMP/run-churn" <<'PYTWO' || fail "the jobs on one node at once"
import json, os, re, sys
spans, ports = [], []
for run in sys.argv[1:]:
    u = [json.loads(l) for l in open(os.path.join(run, "peer0", "metrics.jsonl"))]
    start = next(l["unix_s"] for l in u if l.get("event") == "clock")
    spans.append((start, start + u[-1]["t"]))
    m = re.search(r"listening on \S*:(\d+)", open(os.path.join(run, "peer0.log")).read())
    ports.append(int(m.group(1)) if m else None)
print("jobs on the node: peer 0 ports", ports, "spans", [(round(a), round(b)) for a, b in spans])
assert None not in ports and len(set(ports)) == 3, f"ports {ports}"
for k in (1, 2):
    assert spans[0][0] < spans[k][1] and spans[k][0] < spans[0][1], f"job {k} did not overlap the time-limit job: {spans}"
PYTWO
"$PY" - "$TMP/run-tl" <<'PYTL' || fail "the time-limited run's checks"
import json, os, sys
run = sys.argv[1]
s = json.load(open(os.path.join(run, "summary.json")))
assert s["ended_by"] == "SIGTERM", s.get("ended_by")
p = s["peers"][0]
assert p["state"] == "stopped" and p["steps"] > 0, p
assert p["seconds"] > 50, f"the peer ran {p['seconds']} s: stopped before the one-minute limit?"
lines = [json.loads(l) for l in open(os.path.join(run, "peer0", "metrics.jsonl"))]
done = [l for l in lines if l["event"] == "done"]
assert done and done[-1].get("stopped") is True, "no stopped done line"
ckpts = [l for l in lines if l["event"] == "checkpoint"]
assert ckpts and os.listdir(os.path.join(run, "peer0", "ckpt")), "no checkpoint"
print(f"time limit: peer 0 stopped at step {p['steps']} after {p['seconds']:.1f} s, "
      f"last checkpoint at step {ckpts[-1].get('step')}, ended_by {s['ended_by']}")
PYTL
echo "slurm check: passed"
