#!/usr/bin/env bash
# A swarm of gossip-peer containers in podman, laid out as a StatefulSet's pods: containers
# NAME-0..N-1 on the network NAME-net, each reachable as NAME-i.SERVICE, each with its state volume
# NAME-state-i and the network key mounted read-only.
#
#   deploy/container/podman-swarm.sh up   [options] [-- training flags for gossip-peer]
#   deploy/container/podman-swarm.sh down [options]
#
# --name NAME       container, network and volume prefix (default gt)
# --service NAME    the "headless Service" part of the names (default gossip)
# --replicas N      containers, = shards (default 4)
# --image NAME      (default localhost/gossiptrain:latest)
# --key FILE        the network key (64 hex chars, mode 0600); made if missing (default NAME.key)
# --run-id ID       the run id (GT_RUN_ID) written in every checkpoint: up again on the same
#                   volumes with the same id (and any --replicas) continues the run, with another
#                   id each peer exits 2 (default: none, any checkpoint on the volume continues)
# --data-dir DIR    mounted read-only at /data in every container (then give --data /data)
# --restart POLICY  podman's restart policy (default on-failure:5: a peer that crashes is started
#                   again by podman; one stopped by podman stop or podman kill is not)
#
# down removes the containers, volumes and network of NAME (not the key file). podman here needs
# runc and explicit limits, which this script passes (see docs/containers.md).
set -euo pipefail
cmd=${1:-}
[[ $cmd == up || $cmd == down ]] || { echo "podman-swarm: first argument: up or down" >&2; exit 2; }
shift
NAME=gt SERVICE=gossip REPLICAS=4 IMAGE=localhost/gossiptrain:latest KEY="" DATA=() RESTART=on-failure:5 RUN_ID=()
while (($#)); do
  case $1 in
    --name) NAME=${2:?}; shift 2 ;;
    --service) SERVICE=${2:?}; shift 2 ;;
    --replicas) REPLICAS=${2:?}; shift 2 ;;
    --image) IMAGE=${2:?}; shift 2 ;;
    --key) KEY=${2:?}; shift 2 ;;
    --restart) RESTART=${2:?}; shift 2 ;;
    --run-id) RUN_ID=(-e GT_RUN_ID="${2:?}"); shift 2 ;;
    --data-dir) DATA=(-v "$(realpath "${2:?}"):/data:ro"); shift 2 ;;
    --) shift; break ;;
    *) echo "podman-swarm: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $REPLICAS =~ ^[1-9][0-9]*$ ]] || { echo "podman-swarm: --replicas '$REPLICAS' is not a count" >&2; exit 2; }
RUN=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

if [[ $cmd == down ]]; then
  for ((i = 0; i < REPLICAS; i++)); do podman rm -f -t 0 "$NAME-$i" >/dev/null 2>&1 || true; done
  for ((i = 0; i < REPLICAS; i++)); do podman volume rm -f "$NAME-state-$i" >/dev/null 2>&1 || true; done
  podman network rm -f "$NAME-net" >/dev/null 2>&1 || true
  exit 0
fi

KEY=${KEY:-$NAME.key}
if [[ ! -e $KEY ]]; then
  (umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$KEY")
fi
KEY=$(realpath "$KEY")
podman network exists "$NAME-net" || podman network create "$NAME-net" >/dev/null
for ((i = 0; i < REPLICAS; i++)); do
  podman volume exists "$NAME-state-$i" || podman volume create "$NAME-state-$i" >/dev/null
  podman run -d "${RUN[@]}" --restart "$RESTART" --name "$NAME-$i" --hostname "$NAME-$i" --network "$NAME-net" \
    --network-alias "$NAME-$i.$SERVICE" -v "$NAME-state-$i:/var/lib/gossiptrain" \
    -v "$KEY:/etc/gossiptrain/network.key:ro" "${DATA[@]}" \
    -e GT_K8S_SERVICE="$SERVICE" -e GT_K8S_REPLICAS="$REPLICAS" "${RUN_ID[@]}" "$IMAGE" "$@" >/dev/null
  echo "podman-swarm: started $NAME-$i ($NAME-$i.$SERVICE)"
done
