#!/usr/bin/env bash
# Prints a Secret manifest holding a fresh 32-byte network key (64 hex chars) as network.key, for
# the StatefulSet in this folder:  deploy/k8s/make-secret.sh | kubectl apply -f -
# Keep the output out of version control; every peer of the swarm needs the same key.
set -euo pipefail
name=${1:-gossip-network-key}
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
[[ ${#key} -eq 64 ]] || { echo "make-secret: could not read 32 bytes from /dev/urandom" >&2; exit 1; }
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $name
  labels:
    app.kubernetes.io/name: gossiptrain
type: Opaque
stringData:
  network.key: "$key"
YAML
