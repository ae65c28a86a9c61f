#!/usr/bin/env bash
# tests/gpu/test_gpucheck_rehearsal.sh SOURCE_ROOT BUILD_ROOT -- the GPU machine's run, rehearsed.
#
# Fills a GoogleTest folder from this machine's sources (gpu_check.sh --prepare), checks that the
# plan fits its deadline (--plan), then runs perf/gpu/rehearse.sh: in a mount namespace where
# NCCL is only a pip wheel and GoogleTest only that folder, the device run's configure and build
# (its flags, its targets) and every section up to its first GPU call; then the run itself
# without a GPU, which must reuse the binaries the rehearsal saved. Everything lives in
# BUILD_ROOT/gpucheck, or, when BUILD_ROOT lies inside the source tree (Meson refuses include
# folders there, and the wheel's would be one), in a folder of $TMPDIR named after BUILD_ROOT;
# a second run rebuilds only what changed. Exit 77 (skipped) where the
# rehearsal cannot run: not root, no unshare or overlayfs, no nvcc, no GoogleTest sources.
# With --plan (./run test's short form): the GoogleTest folder and the plan only, no build.
set -euo pipefail
plan_only=0
[ "${1:-}" = --plan ] && { plan_only=1; shift; }
SRC=${1:?usage: test_gpucheck_rehearsal.sh [--plan] SOURCE_ROOT BUILD_ROOT}
BUILD_ROOT=$(cd "${2:?}" && pwd)
SRC=$(cd "$SRC" && pwd)
case "$BUILD_ROOT/" in
  "$SRC"/*) WORK=${TMPDIR:-/tmp}/sketchccl-gpucheck-$(id -u)-$(printf '%s' "$BUILD_ROOT" | md5sum | cut -c1-8) ;;
  *) WORK=$BUILD_ROOT/gpucheck ;;
esac
echo "rehearsal folder: $WORK"
export PATH="$PATH:/usr/local/cuda/bin"
command -v nvcc >/dev/null || { echo "skipped: no nvcc"; exit 77; }
export GPU_CHECK_DEPS=$WORK/deps GPU_CHECK_BUILD=$WORK/build
export JOBS=${JOBS:-2}
mkdir -p "$WORK"
if [ ! -f "$GPU_CHECK_DEPS/googletest/googletest/src/gtest-all.cc" ]; then
  rc=0
  "$SRC/perf/gpu/gpu_check.sh" --prepare || rc=$?
  [ "$rc" -eq 0 ] || { echo "skipped: no GoogleTest sources to prepare from"; exit 77; }
fi
"$SRC/perf/gpu/gpu_check.sh" --plan "$WORK/dry" >/dev/null
head -1 "$WORK/dry/summary.txt"
grep '^plan: estimate' "$WORK/dry/summary.txt"
[ "$plan_only" = 1 ] && exit 0
rm -rf "$WORK/out"
rc=0
"$SRC/perf/gpu/rehearse.sh" "$WORK/out" || rc=$?
[ -f "$WORK/out/summary.txt" ] && cat "$WORK/out/summary.txt"
if [ "$rc" -eq 0 ]; then
  # A pass must have built and reached every section: none failed, cut or left out.
  grep -q '^RESULT: rehearsal ok' "$WORK/out/summary.txt"
  grep -qx 'failed: none' "$WORK/out/summary.txt"
  grep -qx 'cut by time: none' "$WORK/out/summary.txt"
  if grep -q '^not reached:' "$WORK/out/summary.txt"; then
    echo "FAIL: the rehearsal passed without reaching every section"
    exit 1
  fi
  # The run itself, without a GPU: it must take the binaries the rehearsal saved, not build.
  rc=0
  GPU_CHECK_SECTIONS=kernels "$SRC/perf/gpu/gpu_check.sh" "$WORK/run" >/dev/null || rc=$?
  head -3 "$WORK/run/summary.txt"
  grep -q '^build: reused .gpu_deps/prebuilt' "$WORK/run/summary.txt" ||
    { echo "FAIL: the run did not reuse the rehearsal's binaries"; exit 1; }
  [ "$rc" -eq 3 ] || { echo "FAIL: the run without a GPU exited $rc, not 3"; exit 1; }
  rc=0
fi
exit "$rc"
