#!/usr/bin/env bash
# perf/gpu/gpu_check_nccl_tests.sh LIB -- nccl-tests through SketchCCL standalone, 2 ranks on one GPU
# (docs/engine.md, "Several ranks on one GPU"). perf/gpu/gpu_check.sh calls it.
#
# LIB: the built libsketchccl.so, preloaded into every rank (SKETCHCCL_NCCL_LIB=none).
# NCCL_TESTS_DIR: a build of NVIDIA's nccl-tests made outside this repository (its code is not
#   ours to commit), holding all_reduce_perf, reduce_scatter_perf, all_gather_perf, broadcast_perf
#   and sendrecv_perf (its build/ folder, or the folder itself). It must be an MPI build
#   (`make MPI=1`): nccl-tests puts its ranks on devices gpu0, gpu0+1, ... within one process,
#   so two ranks share one GPU only as two MPI processes with NCCL_TESTS_DEVICE=0.
# MPIRUN: the launcher (default mpirun). RUN_TIMEOUT: seconds per run (default 120).
# NCCL_TESTS_ARGS: the size sweep (default "-b 8 -e 32M -f 4 -n 5 -w 2").
#
# Each binary runs twice: SKETCHCCL_CODEC=none with -c 1 (must pass: exit 0 and no wrong
# values), then q8 with -c 0 (must run; its error is sketchccl-perf's to measure).
# Exit: 0 every run as expected; 1 a run failed; 77 skipped (says why).
set -u
LIB=${1:?usage: perf/gpu/gpu_check_nccl_tests.sh path/to/libsketchccl.so}
skip() {
  echo "nccl-tests: skipped: $*"
  exit 77
}
[ -n "${NCCL_TESTS_DIR:-}" ] || skip "NCCL_TESTS_DIR is not set (an MPI build of nccl-tests)"
DIR=$NCCL_TESTS_DIR
[ -x "$DIR/build/all_reduce_perf" ] && DIR=$DIR/build
TESTS="all_reduce_perf reduce_scatter_perf all_gather_perf broadcast_perf sendrecv_perf"
for t in $TESTS; do
  [ -x "$DIR/$t" ] || skip "$DIR/$t is missing"
done
[ -f "$LIB" ] || skip "$LIB is missing (build libsketchccl.so first)"
MPIRUN=${MPIRUN:-mpirun}
command -v "$MPIRUN" >/dev/null 2>&1 || skip "$MPIRUN not found (nccl-tests needs MPI for two ranks on one GPU)"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  skip "no GPU (nvidia-smi)"
fi
MPI_FLAGS=()
if "$MPIRUN" --version 2>&1 | grep -qi 'open mpi' && [ "$(id -u)" -eq 0 ]; then
  MPI_FLAGS+=(--allow-run-as-root)
fi
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
read -r -a SWEEP <<<"${NCCL_TESTS_ARGS:--b 8 -e 32M -f 4 -n 5 -w 2}"
STATUS=0
for t in $TESTS; do
  for codec in none q8; do
    check=1
    [ "$codec" = none ] || check=0
    echo "=== $t, 2 ranks on GPU 0, SKETCHCCL_CODEC=$codec, -c $check"
    # env(1) sets each rank's environment, whichever MPI launches it.
    timeout "$RUN_TIMEOUT" "$MPIRUN" "${MPI_FLAGS[@]}" -np 2 env LD_PRELOAD="$LIB" \
      SKETCHCCL_NCCL_LIB=none SKETCHCCL_CODEC="$codec" SKETCHCCL_TRANSPORT=socket \
      SKETCHCCL_TIMEOUT=60 NCCL_TESTS_DEVICE=0 "$DIR/$t" -g 1 "${SWEEP[@]}" -c "$check" \
      >/tmp/sketchccl_nccl_tests.$$ 2>&1
    rc=$?
    cat /tmp/sketchccl_nccl_tests.$$
    wrong=$(sed -n 's/.*Out of bounds values : \([0-9]*\).*/\1/p' /tmp/sketchccl_nccl_tests.$$ | head -1)
    busbw=$(sed -n 's/.*Avg bus bandwidth *: *\([0-9.e+-]*\).*/\1/p' /tmp/sketchccl_nccl_tests.$$ | head -1)
    rm -f /tmp/sketchccl_nccl_tests.$$
    if [ "$rc" -ne 0 ] || { [ "$check" -eq 1 ] && [ "${wrong:-x}" != 0 ]; }; then
      echo "RESULT $t $codec: FAILED (exit $rc, out of bounds values ${wrong:-?})"
      STATUS=1
    else
      echo "RESULT $t $codec: ok (avg bus bandwidth ${busbw:-?} GB/s$([ "$check" -eq 1 ] && echo ", checked"))"
    fi
  done
done
exit "$STATUS"
