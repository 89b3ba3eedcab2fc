#!/usr/bin/env bash
# Installs every build, test and run dependency of gossiptrain from Debian's packages. Idempotent:
# packages already present are not fetched again. Needs root (or sudo) only when something is missing.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-dev  # the fuzz preset: clang 14 and its libFuzzer, ASan and UBSan runtimes
  libasio-dev libsodium-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2
  libopenblas-dev zlib1g-dev
  iproute2 nftables
  dataset-fashion-mnist
  python3 python3-matplotlib python3-numpy python3-venv python3-dev
  prometheus
  podman runc netavark aardvark-dns iptables mmdebstrap python3-yaml  # netavark needs iptables
  slurmctld slurmd slurm-client munge  # the SLURM system test (docs/cluster.md)
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all dependencies present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup: need root to install: ${missing[*]}" >&2; exit 2
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
