#!/usr/bin/env bash
# perf/gpu/rehearse.sh OUTDIR -- the GPU machine's run rehearsed here, under that machine's conditions.
#
# Runs `perf/gpu/gpu_check.sh --rehearse OUTDIR` inside a private mount namespace (unshare -m) in
# which, as on the GPU machine:
#   - NCCL exists only as a pip wheel: site-packages/nvidia/nccl/{include,lib}, on PYTHONPATH,
#     made from this machine's NCCL (its headers copied, libnccl.so.2 bind-mounted);
#   - the CUDA home holds no nccl*.h, nccl_device/ nor libnccl* (overlays that hide them);
#   - no GoogleTest is installed: /usr/include/g{test,mock}, libg{test,mock}*, their pkg-config
#     and CMake files and /usr/src/g{test,oogletest} are hidden, so the only GoogleTest is the
#     .gpu_deps/googletest that `gpu_check.sh --prepare` filled.
# The check then configures and builds with the device run's flags and runs every step up to the
# first GPU call. The mounts live in the namespace only and end with it.
#
# Needs root (mount namespaces, overlayfs) and unshare; exits 77 (skipped) without them.
# Environment: as gpu_check.sh (GPU_CHECK_BUILD, JOBS, ...). Exit status: gpu_check.sh's.
set -euo pipefail

skip() {
  echo "rehearse: skipped: $*"
  exit 77
}

if [ "${1:-}" != "--inside" ]; then
  OUTDIR=${1:?usage: perf/gpu/rehearse.sh OUTDIR}
  [ "$(id -u)" -eq 0 ] || skip "needs root (a mount namespace with overlay mounts)"
  command -v unshare >/dev/null || skip "no unshare"
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
    skip "no overlayfs in this kernel"
  unshare -m --propagation private true 2>/dev/null || skip "unshare -m is not permitted here"
  mkdir -p "$OUTDIR"
  SCRATCH=$(mktemp -d /tmp/gpucheck-ns.XXXXXX)
  trap 'rmdir "$SCRATCH" 2>/dev/null || true' EXIT
  rc=0
  unshare -m --propagation private "$0" --inside "$SCRATCH" "$OUTDIR" || rc=$?
  exit "$rc"
fi

# ---- inside the namespace ---------------------------------------------------------------------
S=$2
OUTDIR=$3
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mount -t tmpfs -o size=64m gpucheck-ns "$S"

say() { echo "rehearse: $*"; }

# A folder seen through an overlay without the given entries (globs, relative to it).
hide() {
  local dir=$1 key n hit=0
  shift
  [ -d "$dir" ] && [ ! -L "$dir" ] || return 0
  for n in "$@"; do
    compgen -G "$dir/$n" >/dev/null && hit=1
  done
  [ "$hit" -eq 1 ] || return 0
  key=$(echo "$dir" | tr / _)
  mkdir -p "$S/ov/$key/up" "$S/ov/$key/work"
  mount -t overlay "gpucheck-ov$key" \
    -o "lowerdir=$dir,upperdir=$S/ov/$key/up,workdir=$S/ov/$key/work" "$dir"
  local gone=()
  for n in "$@"; do
    compgen -G "$dir/$n" >/dev/null || continue
    gone+=("$n")
    # shellcheck disable=SC2086 # the glob is meant to expand
    rm -rf $dir/$n
  done
  say "hidden in $dir: ${gone[*]}"
}

# The CUDA home as the build finds it: the real folder of the nvcc on PATH.
export PATH="$PATH:/usr/local/cuda/bin"
NVCC=$(command -v nvcc) || skip "no nvcc (the rehearsal builds CUDA code)"
CUDA=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
CUDA_DIRS=()
for d in "$CUDA/include" "$CUDA/lib" "$CUDA/lib64" "$CUDA"/targets/*/include "$CUDA"/targets/*/lib \
         /usr/local/cuda/include /usr/local/cuda/lib64; do
  [ -d "$d" ] && CUDA_DIRS+=("$(readlink -f "$d")")
done
mapfile -t CUDA_DIRS < <(printf '%s\n' "${CUDA_DIRS[@]}" | sort -u)

# The wheel, made from this machine's NCCL before it is hidden.
NCCL_H=""
NCCL_SO=""
for d in "${CUDA_DIRS[@]}" /usr/include /usr/lib/x86_64-linux-gnu; do
  [ -z "$NCCL_H" ] && [ -f "$d/nccl.h" ] && NCCL_H=$d
  [ -z "$NCCL_SO" ] && [ -f "$d/libnccl.so.2" ] && NCCL_SO=$(readlink -f "$d/libnccl.so.2")
done
[ -n "$NCCL_H" ] || skip "no nccl.h on this machine to make the wheel from"
[ -n "$NCCL_SO" ] || skip "no libnccl.so.2 on this machine to make the wheel from"
# At a path that stays the same from one rehearsal to the next (next to the build folder, as
# gpu_check.sh's GoogleTest prefix is): the configured build records where nccl.h was.
SITE=${GPU_CHECK_BUILD:-/tmp/sketchccl-gpu-build}-wheel
mkdir -p "$SITE"
mount -t tmpfs -o size=16m gpucheck-wheel "$SITE"
W=$SITE/nvidia/nccl
mkdir -p "$W/include" "$W/lib"
touch "$SITE/nvidia/__init__.py" "$W/__init__.py"
# Their times kept, so that a build configured by an earlier rehearsal does not recompile.
cp -rp "$NCCL_H"/nccl*.h "$W/include/"
[ -d "$NCCL_H/nccl_device" ] && cp -rp "$NCCL_H/nccl_device" "$W/include/"
touch "$W/lib/libnccl.so.2"
mount --bind "$NCCL_SO" "$W/lib/libnccl.so.2"
say "NCCL wheel: $W (nccl.h from $NCCL_H, libnccl.so.2 from $NCCL_SO)"

# NCCL out of the CUDA home and the system folders; GoogleTest out of everywhere.
for d in "${CUDA_DIRS[@]}"; do
  hide "$d" 'nccl*.h' nccl_device 'libnccl*'
done
# Neither are Google Benchmark nor MPI there (optional here, but configure must do without them).
hide /usr/include nccl.h 'nccl_*.h' gtest gmock benchmark
hide /usr/local/include gtest gmock
hide /usr/bin 'mpic*' 'mpiC*' 'mpicxx*' 'mpif*' 'mpirun*' 'mpiexec*' 'ompi_info*' 'orterun*'

# One overlay per folder, none over another's parent (an overlay hides the mounts below it).
for d in /usr/lib/x86_64-linux-gnu /usr/local/lib; do
  hide "$d" 'libgtest*' 'libgmock*' 'libnccl*' 'pkgconfig/gtest*.pc' 'pkgconfig/gmock*.pc' \
    pkgconfig/nccl.pc cmake/GTest 'libbenchmark*' 'pkgconfig/benchmark*.pc' cmake/benchmark \
    'pkgconfig/ompi*.pc' 'pkgconfig/mpi*.pc' 'pkgconfig/orte*.pc' 
done
hide /usr/src gtest googletest

# The namespace must be what the GPU machine is, else the rehearsal proves nothing.
bad=""
for d in "${CUDA_DIRS[@]}" /usr/include; do
  compgen -G "$d/nccl*.h" >/dev/null && bad="$bad $d/nccl*.h"
  compgen -G "$d/libnccl*" >/dev/null && bad="$bad $d/libnccl*"
done
[ -e /usr/include/gtest ] && bad="$bad /usr/include/gtest"
[ -e /usr/src/googletest ] && bad="$bad /usr/src/googletest"
compgen -G "/usr/lib/x86_64-linux-gnu/libgtest*" >/dev/null && bad="$bad libgtest"
command -v pkg-config >/dev/null && pkg-config --exists gtest && bad="$bad pkg-config-gtest"
if [ -n "$bad" ]; then
  echo "rehearse: FAIL: still visible in the namespace:$bad"
  exit 2
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
say "wheel found by tools/find_pip_nvidia.py: $(python3 "$REPO/tools/find_pip_nvidia.py" | tr '\n' ' ')"
say "CUDA home $CUDA: no NCCL; no GoogleTest but ${GPU_CHECK_DEPS:-$REPO/.gpu_deps}/googletest"

export GPU_CHECK_REHEARSAL_NS="wheel=$W cuda=$CUDA"
rc=0
"$REPO/perf/gpu/gpu_check.sh" --rehearse "$OUTDIR" || rc=$?
exit "$rc"
