#!/usr/bin/env bash
# Builds the gossiptrain container image on a machine with no image registry: a Debian root file
# system from Debian's packages (mmdebstrap), imported as the base image, then the Containerfile.
#
#   deploy/container/build-image.sh [--build DIR] [--image NAME] [--base NAME] [--rebuild-base]
#
# --build DIR    the CMake build tree with gossip-peer and gossip-launch (default: build)
# --image NAME   the image to build (default: localhost/gossiptrain:latest)
# --base NAME    the base image; made with mmdebstrap if podman does not have it
#                (default: localhost/gossiptrain-base:bookworm)
# --rebuild-base make the base again even if podman has it
# --suite NAME   the Debian suite of the base (default: bookworm)
# --plots        add python3, numpy and matplotlib (plot-packages.txt) and scripts/plot/plot_run.py,
#                so that gossip-launch --report in the container draws its plots; the base is
#                then localhost/gossiptrain-base-plots:bookworm (made the same way)
#
# Prints the image's size and the time each step took. Needs root, podman, runc and mmdebstrap
# (scripts/setup.sh installs them). The image's programs must find every library (ldd is checked
# inside the image); a missing one fails the build with its name.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
IMAGE=localhost/gossiptrain:latest
BASE=
SUITE=bookworm
REBUILD_BASE=0
PLOTS=0
while (($#)); do
  case $1 in
    --build) BUILD=${2:?--build needs a DIR}; shift 2 ;;
    --image) IMAGE=${2:?--image needs a NAME}; shift 2 ;;
    --base) BASE=${2:?--base needs a NAME}; shift 2 ;;
    --suite) SUITE=${2:?--suite needs a NAME}; shift 2 ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    --plots) PLOTS=1; shift ;;
    -h|--help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "build-image: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# podman here needs runc (crun: "cgroups in hybrid mode not supported") and explicit limits.
PODMAN_RUN=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
for tool in podman mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool not found (scripts/setup.sh)" >&2; exit 2; }
done
for prog in gossip-peer gossip-launch; do
  [[ -x $BUILD/apps/$prog ]] || { echo "build-image: $BUILD/apps/$prog not built" >&2; exit 2; }
done
PKG_FILES=(deploy/container/runtime-packages.txt)
if ((PLOTS)); then
  PKG_FILES+=(deploy/container/plot-packages.txt)
  BASE=${BASE:-localhost/gossiptrain-base-plots:bookworm}
fi
BASE=${BASE:-localhost/gossiptrain-base:bookworm}
mapfile -t PKGS < <(cat "${PKG_FILES[@]}" | grep -v '^\s*#' | grep -v '^\s*$')

CTX=$(mktemp -d "${TMPDIR:-/tmp}/gt-image.XXXXXX")
trap 'rm -rf "$CTX"' EXIT
trap 'exit 143' TERM INT
t0=$SECONDS
if ((REBUILD_BASE)) || ! podman image exists "$BASE"; then
  # minbase: dpkg, apt and the essential packages only, without recommended packages; no docs,
  # manuals or locales. The merged-usr hook makes bookworm's merged /usr itself, without the
  # usrmerge package, which would pull in perl (about 50 MB).
  include=$(IFS=,; echo "${PKGS[*]}")
  hooks=()
  [[ -d /usr/share/mmdebstrap/hooks/maybe-merged-usr ]] &&
    hooks=(--hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr)
  mmdebstrap --variant=minbase --include="$include" "${hooks[@]}" \
    --aptopt='Apt::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$CTX/rootfs.tar"
  podman import --change 'CMD ["/bin/sh"]' "$CTX/rootfs.tar" "$BASE" >/dev/null
  rm -f "$CTX/rootfs.tar"
  echo "build-image: base $BASE made in $((SECONDS - t0)) s"
else
  echo "build-image: base $BASE already present"
fi

t1=$SECONDS
mkdir -p "$CTX/stage/bin"
cp deploy/container/Containerfile "$CTX/"
# The Containerfile installs this list with apt where the base lacks it (a registry's base).
cat "${PKG_FILES[@]}" > "$CTX/runtime-packages.txt"
cp deploy/container/gt-entrypoint "$CTX/stage/bin/"
# The two programs a pod runs, from the build tree (cmake --install would add gossip-bench,
# gossip-sim and the CUDA module, which this CPU image does not use).
cp "$BUILD/apps/gossip-peer" "$BUILD/apps/gossip-launch" "$CTX/stage/bin/"
strip --strip-unneeded "$CTX"/stage/bin/gossip-* 2>/dev/null || true
# gossip-launch finds the plot script in ../share/gossiptrain/scripts beside its own folder.
if ((PLOTS)); then
  mkdir -p "$CTX/stage/share/gossiptrain/scripts"
  cp scripts/plot/plot_run.py scripts/plot/run_metrics.py "$CTX/stage/share/gossiptrain/scripts/"
fi
old_id=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build "${PODMAN_RUN[@]}" --build-arg BASE="$BASE" -t "$IMAGE" -f "$CTX/Containerfile" "$CTX"
# The image this one replaces, unless a container still uses it.
if [[ -n $old_id && $old_id != $(podman image inspect --format '{{.Id}}' "$IMAGE") ]]; then
  podman rmi "$old_id" >/dev/null 2>&1 || true
fi
echo "build-image: image $IMAGE built in $((SECONDS - t1)) s"

# Every library each program needs is in the image.
missing=$(podman run --rm "${PODMAN_RUN[@]}" --entrypoint /bin/sh "$IMAGE" -c \
  'for p in /opt/gossiptrain/bin/gossip-peer /opt/gossiptrain/bin/gossip-launch; do
     ldd "$p" | grep "not found" | sed "s|^|$p: |"; done')
if [[ -n $missing ]]; then
  echo "build-image: libraries missing in $IMAGE:" >&2
  echo "$missing" >&2
  exit 1
fi
if ((PLOTS)) && ! podman run --rm "${PODMAN_RUN[@]}" --entrypoint /usr/bin/python3 "$IMAGE" -c \
    'import matplotlib, numpy' >/dev/null; then
  echo "build-image: python3 cannot import matplotlib and numpy in $IMAGE" >&2
  exit 1
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(podman image inspect --format '{{.Size}}' "$BASE")
echo "build-image: $IMAGE size $((size / 1000000)) MB (base $BASE $((base_size / 1000000)) MB)"
