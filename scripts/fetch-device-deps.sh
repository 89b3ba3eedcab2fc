#!/usr/bin/env bash
# Fetches the Debian packages that the GPU "device" machine lacks (it has nvcc, cmake and PyTorch,
# not our libraries) and unpacks them into a folder that scripts/device-check.sh builds against.
# Usage: scripts/fetch-device-deps.sh [DEST]   (DEST defaults to .deps; env GT_DEPS_DIR also works)
# Leaves DEST/root (the unpacked tree, pruned to what a build needs). The .debs are deleted after
# unpacking unless --keep-debs, so that DEST stays small enough to carry to the device.
set -euo pipefail

keep_debs=0
dest="${GT_DEPS_DIR:-.deps}"
for a in "$@"; do
  case "$a" in
    --keep-debs) keep_debs=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    -*) echo "fetch-device-deps: unknown option $a" >&2; exit 2 ;;
    *) dest="$a" ;;
  esac
done

# -dev packages for headers and CMake/pkg-config files, runtime packages for the shared libraries
# they link to, and a pkg-config and ninja in case the device has none.
PKGS=(
  libspdlog-dev libspdlog1.10
  libfmt-dev libfmt9
  libsodium-dev libsodium23
  libasio-dev nlohmann-json3-dev catch2
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  zlib1g-dev zlib1g
  pkgconf-bin libpkgconf3
  ninja-build
)

for tool in apt-get dpkg; do
  command -v "$tool" >/dev/null || { echo "fetch-device-deps: needs $tool (Debian)" >&2; exit 2; }
done

mkdir -p "$dest/debs"
dest="$(cd "$dest" && pwd)"
debs="$dest/debs"
root="$dest/root"

echo "fetch-device-deps: downloading ${#PKGS[@]} packages into $debs"
if ! (cd "$debs" && apt-get download -q "${PKGS[@]}"); then
  echo "fetch-device-deps: apt-get download failed; try 'apt-get update' first" >&2
  exit 1
fi

rm -rf "$root"
mkdir -p "$root"
for deb in "$debs"/*.deb; do
  dpkg -x "$deb" "$root"
done

# Debian reaches BLAS through update-alternatives links into /etc/alternatives, which do not exist
# in an unpacked tree: point them at the OpenBLAS (pthread) files directly, relatively.
libdir="$root/usr/lib/x86_64-linux-gnu"
for name in libblas.so libblas.so.3; do
  if [[ -e "$libdir/openblas-pthread/$name" ]]; then
    ln -sfn "openblas-pthread/$name" "$libdir/$name"
  fi
done
ln -sfn "openblas-pthread/libopenblas.so" "$libdir/libopenblas.so"
ln -sfn "openblas-pthread/libopenblas.so.0" "$libdir/libopenblas.so.0"
for name in cblas.h openblas_config.h f77blas.h; do
  [[ -e "$root/usr/include/x86_64-linux-gnu/openblas-pthread/$name" ]] &&
    ln -sfn "x86_64-linux-gnu/openblas-pthread/$name" "$root/usr/include/$name"
done

# Absolute links (libz.so -> /lib/...) would point into the device's own system: make them
# relative inside the tree when their target was unpacked too.
while IFS= read -r link; do
  target="$(readlink "$link")"
  if [[ "$target" == /* && "$target" != /etc/alternatives/* && -e "$root$target" ]]; then
    ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$root$target")" "$link"
  fi
done < <(find "$root" -type l)

# Prune what a build never reads, to stay well under the device's carry limit: docs, man pages,
# static archives (OpenBLAS's alone is ~30 MiB) and LAPACK (nothing here uses it).
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian"
find "$root" -name '*.a' \( -path '*openblas*' -o -name 'libblas.a' -o -name 'liblapack*' \) -delete
find "$root" -name 'liblapack.so*' -delete
dangling="$(find "$root" -xtype l | grep -v '/etc/alternatives' || true)"
find "$root" -xtype l -delete  # remaining alternatives links: unusable outside a real install

# These libraries need GLIBCXX_3.4.30 (gcc 12). A device whose own libstdc++ is older gets this
# one from root/compat (device-check.sh decides); it stays out of the default library folder so a
# newer system libstdc++ is never shadowed.
compat_tmp="$dest/compat-tmp"
rm -rf "$compat_tmp" "$root/compat"
mkdir -p "$compat_tmp" "$root/compat"
(cd "$compat_tmp" && apt-get download -q libstdc++6)
dpkg -x "$compat_tmp"/libstdc++6_*.deb "$compat_tmp"
mv "$compat_tmp"/usr/lib/x86_64-linux-gnu/libstdc++.so.6* "$root/compat/"
rm -rf "$compat_tmp"

if ((keep_debs == 0)); then rm -rf "$debs"; fi

for must in usr/include/spdlog/spdlog.h usr/include/fmt/format.h usr/include/sodium.h \
            usr/include/asio.hpp usr/include/nlohmann/json.hpp usr/include/catch2/catch.hpp \
            usr/include/cblas.h usr/include/zlib.h \
            usr/lib/x86_64-linux-gnu/libopenblas.so.0 usr/lib/x86_64-linux-gnu/libspdlog.so \
            usr/lib/x86_64-linux-gnu/libsodium.so usr/bin/pkgconf usr/bin/ninja; do
  if [[ ! -e "$root/$must" ]]; then
    echo "fetch-device-deps: missing $must after unpacking" >&2
    exit 1
  fi
done
[[ -n "$dangling" ]] && echo "fetch-device-deps: removed dangling links: $dangling"
carry="$(realpath --relative-to=. "$dest" 2>/dev/null || echo "$dest")"
echo "fetch-device-deps: ready in $root ($(du -sh "$root" | cut -f1)); carry '$carry' to the device"
