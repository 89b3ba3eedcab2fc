#!/usr/bin/env bash
# GPU check for the "device" machine (nvcc, cmake and PyTorch, but none of our Debian libraries):
# builds test_kernels and gossip-bench against the packages unpacked by
# scripts/fetch-device-deps.sh, runs the [cuda] tests, the CUDA training benchmark and the
# PyTorch reference, and writes their outputs to $OUT (or build-device/check).
# Usage: scripts/device-check.sh [DEPS_DIR]   (or env GT_DEPS_DIR; default .deps)
# Env: OUT (outputs), GT_DEVICE_BUILD_DIR (default build-device), CUDA_ARCHS (e.g. 90),
#      GT_CMAKE_ARGS (extra configure arguments, split on spaces),
#      GT_STAGES (comma-separated, default build,test,table): build, test ([cuda] and [kernels]
#      tests), table (gossip-bench train against PyTorch: table.json), train (Fashion-MNIST: one
#      peer per precision, 8 peers of gossip-launch), cpu (transport and average benchmarks),
#      GT_DATA (the Fashion-MNIST folder for train; default Debian's), GT_LAUNCH_EXTRA and
#      GT_AVERAGE_EXTRA (a second launch / average run with these flags), GT_TRANSPORT_THREADS
#      (more transport runs, one per --crypto-threads value).
set -uo pipefail

deps="${1:-${GT_DEPS_DIR:-.deps}}"
echo "device-check: needs carried: ${deps} (made here by scripts/fetch-device-deps.sh ${deps})"
[[ -d "$deps" ]] && deps="$(cd "$deps" && pwd)"

cd "$(dirname "$0")/.."
build="${GT_DEVICE_BUILD_DIR:-build-device}"
out="${OUT:-$build/check}"
mkdir -p "$out"

die() { echo "device-check: $*" >&2; exit 2; }

[[ -d "$deps" ]] ||
  die "no dependency folder '$deps': run scripts/fetch-device-deps.sh here and carry it"
root="$(cd "$deps" && pwd)"
[[ -d "$root/root/usr" ]] && root="$root/root"
[[ -f "$root/usr/include/spdlog/spdlog.h" ]] || die "'$root' does not look like unpacked packages"
libdir="$root/usr/lib/x86_64-linux-gnu"

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
command -v nvcc >/dev/null || die "nvcc not found"
command -v cmake >/dev/null || die "cmake not found"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  sed 's/^/device-check: gpu: /'
echo "device-check: $(nvcc --version | tail -1); $(cmake --version | head -1)"

# The unpacked libraries are Debian 12 builds: glibc >= 2.34, and GLIBCXX_3.4.30 (taken from
# root/compat when the machine's own libstdc++ is older).
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
if [[ -n "$glibc" && "$(printf '%s\n2.34\n' "$glibc" | sort -V | head -1)" != "2.34" ]]; then
  die "glibc $glibc is older than 2.34, which the Debian 12 libraries in $root need"
fi
rpath="$libdir:$libdir/openblas-pthread"
sys_cxx="$(${CXX:-c++} -print-file-name=libstdc++.so.6 2>/dev/null || true)"
if [[ -f "$sys_cxx" ]] && ! grep -qa 'GLIBCXX_3\.4\.30' "$sys_cxx"; then
  echo "device-check: system libstdc++ lacks GLIBCXX_3.4.30: using $root/compat"
  rpath="$root/compat:$rpath"
fi

# Our tools come after the machine's own, and LD_LIBRARY_PATH stays untouched (PyTorch and the
# compilers keep their own libraries): our binaries find $root's libraries through DT_RPATH, which
# unlike RUNPATH also serves libopenblas's own dependency, libgfortran.
export PATH="$PATH:$root/usr/bin"
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$root/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$root"
pkgconf_bin="$(command -v pkg-config || true)"
if [[ -z "$pkgconf_bin" || "$pkgconf_bin" == "$root"/* ]]; then
  mkdir -p "$build"
  pkgconf_bin="$(cd "$build" && pwd)/pkg-config"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libdir" "$root/usr/bin/pkgconf" \
    > "$pkgconf_bin"
  chmod +x "$pkgconf_bin"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

link_flags="-Wl,--disable-new-dtags -Wl,-rpath-link,$libdir"
link_flags+=" -Wl,-rpath,$rpath"
cfg=(
  -S . -B "$build" "${generator[@]}"
  -DCMAKE_BUILD_TYPE=Release
  -DGT_CUDA=ON
  "-DCMAKE_PREFIX_PATH=$root/usr;$libdir/cmake;$root/usr/share/cmake"
  "-DCMAKE_LIBRARY_PATH=$libdir/openblas-pthread;$libdir;$root/lib/x86_64-linux-gnu"
  "-DCMAKE_INCLUDE_PATH=$root/usr/include"
  -DBLA_VENDOR=OpenBLAS
  "-DCBLAS_INCLUDE_DIR=$root/usr/include/x86_64-linux-gnu/openblas-pthread"
  "-DASIO_INCLUDE_DIR=$root/usr/include"
  "-DPKG_CONFIG_EXECUTABLE=$pkgconf_bin"
  "-DCMAKE_EXE_LINKER_FLAGS=$link_flags"
)
[[ -n "${CUDA_ARCHS:-}" ]] && cfg+=("-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS")
# shellcheck disable=SC2206  # word splitting is the point
[[ -n "${GT_CMAKE_ARGS:-}" ]] && cfg+=(${GT_CMAKE_ARGS})

status=0
step() {  # step NAME CMD...: runs CMD, keeps its log in $out/NAME.log, records a failure
  local name="$1"; shift
  echo "device-check: == $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  if ((rc != 0)); then echo "device-check: $name FAILED (exit $rc)"; status=1; fi
  return "$rc"
}

stages=",${GT_STAGES:-build,test,table},"
has() { [[ "$stages" == *",$1,"* ]]; }
bench="$build/apps/gossip-bench"
data="${GT_DATA:-/usr/share/datasets/fashion-mnist}"

if has build; then
  step configure cmake "${cfg[@]}" || exit 1
  # shellcheck disable=SC2086  # GT_BUILD_TARGETS: a shorter list for a quick call
  step build cmake --build "$build" -j "$(nproc)" \
    --target ${GT_BUILD_TARGETS:-test_kernels gossip-bench gossip-peer gossip-launch} || exit 1
fi

if has test; then
  step test_cuda "$build/tests/test_kernels" "[cuda]" --durations yes
  if grep -q "no CUDA device: skipping" "$out/test_cuda.log"; then
    echo "device-check: the [cuda] tests skipped: this machine's GPU is not visible to the build"
    status=1
  fi
  step test_cpu "$build/tests/test_kernels" "[kernels]"
fi

# The comparison table of issue 14: ours (data resident, fp32/tf32/bf16, and the old per-step
# upload) against PyTorch eager (batch uploaded or on the GPU, fp32/TF32/bf16 autocast), each row
# measured in one go; every result is a JSON line of table.jsonl, summarized in table.json.
if has table; then
  : > "$out/table.jsonl"
  rows=("mlp:784-256-256-10 128" "mlp:784-256-256-10 1024" "mlp:784-256-256-10 8192"
        "mlp:784-4096-4096-4096-10 1024")
  # GT_TABLE_ROWS: only these rows, e.g. "mlp:784-256-256-10:1024 mlp:784-256-256-10:8192".
  if [[ -n "${GT_TABLE_ROWS:-}" ]]; then
    rows=()
    for r in ${GT_TABLE_ROWS}; do rows+=("${r%:*} ${r##*:}"); done
  fi
  for row in "${rows[@]}"; do
    read -r model batch <<< "$row"
    for prec in fp32 tf32 bf16; do
      step "ours_${prec}_${batch}" "$bench" train --backend cuda --model "$model" --batch "$batch" \
        --precision "$prec" --json && grep '^{' "$out/ours_${prec}_${batch}.log" >> "$out/table.jsonl"
    done
    step "ours_upload_${batch}" "$bench" train --backend cuda --model "$model" --batch "$batch" \
      --data upload --json && grep '^{' "$out/ours_upload_${batch}.log" >> "$out/table.jsonl"
    for mode in "fp32" "fp32 --no-upload" "tf32 --no-upload" "bf16 --no-upload"; do
      read -r prec extra <<< "$mode"
      name="torch_${prec}${extra:+_gpu}_${batch}"
      # shellcheck disable=SC2086
      step "$name" python3 scripts/experiments/bench_torch_mlp.py --model "$model" \
        --batch "$batch" --precision "$prec" $extra && grep '^{' "$out/$name.log" >> "$out/table.jsonl"
    done
  done
  python3 scripts/experiments/device_table.py "$out/table.jsonl" | tee "$out/table.json"
fi

# Fashion-MNIST, one peer, 10 epochs in each precision; 8 peers of one launch on the GPU.
if has train; then
  for prec in fp32 tf32 bf16; do
    step "peer_${prec}" "$build/apps/gossip-peer" --backend cuda --precision "$prec" --epochs 10 \
      --data "$data" --identity "$out/peer.key"
  done
  step launch8 "$build/apps/gossip-launch" --peers 8 --backend cuda --partition iid --epochs 10 \
    --data "$data" --no-plots --out "$out/launch8"
  # GT_LAUNCH_EXTRA: the same launch once more with these flags, e.g. "--max-lag 4".
  # shellcheck disable=SC2086
  [[ -n "${GT_LAUNCH_EXTRA:-}" ]] &&
    step launch8_extra "$build/apps/gossip-launch" --peers 8 --backend cuda --partition iid \
      --epochs 10 --data "$data" --no-plots --out "$out/launch8_extra" ${GT_LAUNCH_EXTRA}
fi

# The CPU side on this machine's cores: the channel against plain TCP and the AEAD alone, and
# training with exchanges back to back under the default core plan and without pinning.
if has cpu; then
  step topology lscpu -e=CPU,CORE,SOCKET
  step transport "$bench" transport --json --size-mb 256
  for t in ${GT_TRANSPORT_THREADS:-}; do  # e.g. "1 8": --crypto-threads sweep
    step "transport_t$t" "$bench" transport --json --size-mb 256 --crypto-threads "$t"
  done
  step average_default "$bench" average --params 25000000 --json
  [[ -n "${GT_AVERAGE_EXTRA:-}" ]] &&  # e.g. "--net-cores 0" for the unpinned comparison
    step average_extra "$bench" average --params 25000000 --json ${GT_AVERAGE_EXTRA}
fi
echo "device-check: outputs in $out; $([[ $status == 0 ]] && echo OK || echo 'SOME STEPS FAILED')"
exit "$status"
