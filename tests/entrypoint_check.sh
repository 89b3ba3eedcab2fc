#!/usr/bin/env bash
# deploy/container/gt-entrypoint without a container: what it passes to gossip-peer (a stand-in on
# PATH that writes its arguments) as a StatefulSet's pod and as an indexed Job's pod
# (JOB_COMPLETION_INDEX), and its refusals (exit code 2, naming the variable).
#   bash tests/entrypoint_check.sh REPO_ROOT
set -u
ROOT=${1:?REPO_ROOT}
EP=$ROOT/deploy/container/gt-entrypoint
T=$(mktemp -d "${TMPDIR:-/tmp}/gt-entrypoint.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/args"\n' "$T" > "$T/bin/gossip-peer"
chmod +x "$T/bin/gossip-peer"
fails=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi; }
# HOSTNAME and the rest as Kubernetes gives them; no key file (an open swarm, a warning).
run() { rm -f "$T/args"; env -i PATH="$T/bin:/usr/bin:/bin" GT_STATE_DIR="$T/state" \
  GT_NETWORK_KEY_FILE="$T/no-key" GT_K8S_SERVICE=svc GT_K8S_REPLICAS=4 "$@" sh "$EP" --data synthetic \
  2> "$T/err"; }
args() { tr '\n' ' ' < "$T/args"; }

run HOSTNAME=gossip-2
check '[ $? -eq 0 ] && args | grep -q -- "--metrics $T/state/metrics.jsonl " &&
       args | grep -q -- "--checkpoint-dir $T/state/checkpoint " && args | grep -q -- "--run-dir $T/state "' \
  "a StatefulSet's pod: its state in GT_STATE_DIR itself"
run HOSTNAME=gossip-run-2 JOB_COMPLETION_INDEX=2
check '[ $? -eq 0 ] && args | grep -q -- "--metrics $T/state/peer2/metrics.jsonl " &&
       args | grep -q -- "--identity $T/state/peer2/identity.key " &&
       args | grep -q -- "--checkpoint-dir $T/state/peer2/checkpoint " && [ -d "$T/state/peer2/checkpoint" ] &&
       args | grep -q -- "--run-dir $T/state " &&
       args | grep -q -- "--cluster k8s" && args | grep -q -- "--data synthetic"' \
  "an indexed Job's pod: its state in GT_STATE_DIR/peerINDEX of the shared volume"
run HOSTNAME=gossip-run-12 JOB_COMPLETION_INDEX=12
check '[ $? -eq 0 ] && args | grep -q -- "--metrics $T/state/peer12/metrics.jsonl "' "index 12"
for bad in "gossip-run-2 1" "gossip-run-12 2" "gossip-run x" "gossip-run-1 -1" "2 2" "gossip-run-0 ''"; do
  set -- $bad
  run HOSTNAME="$1" JOB_COMPLETION_INDEX="$(eval echo $2)"
  rc=$?
  check '[ $rc -eq 2 ] && [ ! -e "$T/args" ] && grep -q JOB_COMPLETION_INDEX "$T/err"' \
    "HOSTNAME=$1 JOB_COMPLETION_INDEX=$2 refused with exit 2: $(head -c 200 "$T/err")"
done
echo "$fails failed"
[ "$fails" -eq 0 ]
