#!/usr/bin/env bash
# perf/gpu/gpu_check.sh [--prepare | --plan | --rehearse | --dry-run] [OUTDIR] -- the GPU machine's
# one run (docs/cuda.md, "The GPU check").
#
#   --prepare         here, before the run: copies GoogleTest's sources (GTEST_SRC, default
#                     Debian's /usr/src/googletest) into .gpu_deps/googletest, which travels
#                     with the run (the device tool's `carry`); the GPU machine has none.
#   --plan OUTDIR     prints the plan (sections, their timeouts and estimates) and the run's
#                     time estimate, which must fit the deadline; builds nothing, needs no GPU.
#   --rehearse OUTDIR the real run without a GPU (--dry-run is the same): the plan and its
#                     estimate, the same tools, GoogleTest from .gpu_deps, configure and build
#                     with the device run's flags, then every section up to its first GPU call
#                     (which skips here: exit 77). perf/gpu/rehearse.sh runs it in a mount
#                     namespace shaped like the GPU machine. On success it saves the device
#                     run's binaries in .gpu_deps/prebuilt, for the run to reuse.
#   OUTDIR            the run, on the GPU machine (e.g. "$OUT").
#
# The run: at t=0 a keep-alive process (python3: import torch, one CUDA context, then sleep;
# killed by its PID when the run ends) that loads the driver and warms the page cache for every
# later process; a build (reused from .gpu_deps/prebuilt when it was made from these sources by
# the same nvcc release and its binaries load here, else configured and built here with
# -Dnccl_home=python -Dwerror=false -Dsm_archs=90); then the sections in order of importance,
# each under its own timeout and all under one deadline (GPU_CHECK_DEADLINE, 495 s): a section
# that would start too late is "cut by time". The plan table below is the one list of sections.
#
# At most 8 result files in OUTDIR: summary.txt (its first lines: the result, which sections ran,
# passed, failed, were skipped or cut, and each finished section's wall time against its
# estimate), env.txt, gpu_check.log (the build and everything else), tests.log (the GoogleTest
# sections), ddp.txt, stress.txt (the hazards and in_front sections), codec_bench.txt,
# codec_bench.json.
#
# Exit status: 0 every section passed (rehearsal: built, every step ran up to its GPU call, the
# plan fits); 1 a section failed or was cut; 2 the build could not be configured or built (a
# missing tool, GoogleTest, nccl.h: see summary.txt); 3 no GPU in a real run (built, nothing ran).
#
# Environment: GPU_CHECK_BUILD (build folder, default /tmp/sketchccl-gpu-build), GPU_CHECK_DEPS
# (default .gpu_deps in the repository), GPU_CHECK_DEADLINE (seconds, default 495),
# GPU_CHECK_SECTIONS (a subset of the plan, in plan order), GTEST_SRC (--prepare), JOBS.
set -euo pipefail

MODE=run
case "${1:-}" in
  --prepare | --plan | --rehearse)
    MODE=${1#--}
    shift
    ;;
  --dry-run)
    MODE=rehearse
    shift
    ;;
  -*)
    echo "usage: perf/gpu/gpu_check.sh [--prepare | --plan | --rehearse | --dry-run] [OUTDIR]" >&2
    exit 2
    ;;
esac
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEPS=${GPU_CHECK_DEPS:-$REPO/.gpu_deps}

if [ "$MODE" = prepare ]; then
  SRC=${GTEST_SRC:-/usr/src/googletest}
  if [ ! -f "$SRC/googletest/src/gtest-all.cc" ]; then
    echo "gpu_check --prepare: no GoogleTest sources in $SRC (Debian: apt-get install googletest;" \
      "or set GTEST_SRC)" >&2
    exit 2
  fi
  mkdir -p "$DEPS"
  rm -rf "$DEPS/googletest.new"
  cp -rL "$SRC" "$DEPS/googletest.new"
  rm -rf "$DEPS/googletest"
  mv "$DEPS/googletest.new" "$DEPS/googletest"
  echo "gpu_check --prepare: GoogleTest sources in $DEPS/googletest ($(du -sh "$DEPS/googletest" | cut -f1))"
  exit 0
fi

OUTDIR=${1:?usage: perf/gpu/gpu_check.sh [--prepare | --plan | --rehearse | --dry-run] OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
BUILD=${GPU_CHECK_BUILD:-/tmp/sketchccl-gpu-build}
DEADLINE=${GPU_CHECK_DEADLINE:-495}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
LOG=$OUTDIR/gpu_check.log
TESTS=$OUTDIR/tests.log
SUMMARY=$OUTDIR/summary.txt
DETAILS=$(mktemp)
KEEPALIVE_PID=""
KEEPALIVE_DIR=$(mktemp -d)
# The keep-alive process is ended by its PID, however the run ends.
stop_keepalive() {
  if [ -n "$KEEPALIVE_PID" ] && kill -0 "$KEEPALIVE_PID" 2>/dev/null; then
    kill "$KEEPALIVE_PID" 2>/dev/null || true
    wait "$KEEPALIVE_PID" 2>/dev/null || true
  fi
  KEEPALIVE_PID=""
}
trap 'stop_keepalive; rm -rf "$DETAILS" "$KEEPALIVE_DIR"' EXIT
START=$SECONDS
: >"$LOG"
: >"$TESTS"

# ---- the plan -------------------------------------------------------------------------------------
# name timeout_s estimate_s: what a pass proves. The estimates are for the H200 machine (16 cores);
# the build's is for building there, 0 when the prebuilt binaries are reused.
PLAN=(
  "build 270 150 the library and the run's test binaries build with the machine's compilers"
  "kernels 60 15 every codec kernel gives the CPU reference's bits (unit_kernels_codec_gpu)"
  "staging 60 15 the staged call on a real stream: stream order, both flag mechanisms, block reuse, chunks read after their flags and copied back before the last is done, the hazard cases, then again under one hardware queue (gpu_staging_test)"
  "api 110 45 the AllReduce on device buffers through nccl.h, standalone: 2 ranks (GpuApi and six codecs) first, then 4 ranks, identical bytes on every rank"
  "device_codecs 90 30 the second rung (SKETCHCCL_DEVICE_CODECS=device): the linear codecs' ring kernels on the caller's stream give the host codecs' bytes (AllReduce and ReduceScatter, 2 and 4 ranks), then stream_stress's hazards on it under one hardware queue"
  "first_contact 120 60 first calls under a held stream (q8 casq3 s2 sparse first), two communicators, a capture on another thread, growing buckets, abort, CUDA_LAUNCH_BLOCKING=1 (the same path)"
  "hazards 150 40 stream_stress: 64 application streams, an application thread in cudaFree / a 64 MiB pageable copy / cudaHostAlloc during the calls, CUDA_DEVICE_MAX_CONNECTIONS unset 1 32, streams at the greatest priority; proxy_cuda_calls 0"
  "in_front 70 25 stream_stress in front of the wheel's libnccl: an int32 AllReduce forwarded to NCCL right behind a taken-over float one on the same stream"
  "ddp_nccl 180 100 PyTorch DDP in front of the wheel's NCCL: 2 ranks flat and 2 nodes x 2, q8 really compressing, loss against the exact run"
  "codec_bench 40 10 GB/s per codec at 2^25 elements (the kernels: the linear codecs' are the second rung's)"
)
# What a section's pass depends on that is being fixed elsewhere; until then it reports it.
declare -A P_DEPENDS=(
  [ddp_nccl]="q8_4 needs the hierarchy in front of NCCL (ReduceScatter's ncclInProgress, the AllGather after a failed rail)"
)
declare -A P_TIMEOUT P_EST P_WHAT
ORDER=()
for row in "${PLAN[@]}"; do
  read -r name t e what <<<"$row"
  ORDER+=("$name")
  P_TIMEOUT[$name]=$t
  P_EST[$name]=$e
  P_WHAT[$name]=$what
done
SECTIONS=${GPU_CHECK_SECTIONS:-${ORDER[*]:1}}
for s in $SECTIONS; do
  [ -n "${P_TIMEOUT[$s]:-}" ] && [ "$s" != build ] || {
    echo "gpu_check: unknown section $s (the plan: ${ORDER[*]:1})" >&2
    exit 2
  }
done

declare -A STATUS NOTE SECS
log() { echo "[gpu_check +$((SECONDS - START))s] $*" | tee -a "$LOG"; }
detail() { echo "$*" | tee -a "$LOG" "$DETAILS"; }
elapsed() { echo $((SECONDS - START)); }

# summary.txt: the result and the sections' states first, then the details; rewritten after
# every section, so that a run killed from outside still leaves one.
write_summary() {
  declare -F keepalive_state >/dev/null && keepalive_state
  local final=${1:-running} s st ran="" passed="" failed="" skipped="" cut="" notfixed="" notrun=""
  local times=""
  for s in build $SECTIONS; do
    st=${STATUS[$s]:-}
    [ -n "${SECS[$s]:-}" ] && times+=" $s ${SECS[$s]}s/${P_EST[$s]}s"
    case $st in
      pass) passed+=" $s" ;;
      fail) failed+=" $s" ;;
      skip) skipped+=" $s" ;;
      cut) cut+=" $s" ;;
      notfixed) notfixed+=" $s" ;;
      "") notrun+=" $s" ;;
    esac
    case $st in pass | fail | notfixed) ran+=" $s(${SECS[$s]:-0}s)" ;; esac
  done
  {
    echo "RESULT: $final -- $MODE, $(elapsed) s of a $DEADLINE s deadline"
    echo "ran:${ran:- none}"
    echo "passed:${passed:- none}"
    echo "failed:${failed:- none}"
    echo "skipped:${skipped:- none}"
    echo "cut by time:${cut:- none}"
    echo "not yet fixed:${notfixed:- none}"
    [ -n "$notrun" ] && echo "not reached:$notrun"
    echo "wall time (measured/estimate):${times:- none}"
    echo "keep-alive: ${KEEPALIVE_STATE:-not started}"
    echo "---"
    cat "$DETAILS"
  } >"$SUMMARY.tmp"
  mv "$SUMMARY.tmp" "$SUMMARY"
}

# ---- tools, the prebuilt binaries' stamp -----------------------------------------------------------
export PATH="$PATH:/usr/local/cuda/bin"
# pip's meson and ninja live next to the python3 that holds them.
PYBIN=$(dirname "$(readlink -f "$(command -v python3)")")
[ -d "$PYBIN" ] && export PATH="$PATH:$PYBIN:$(dirname "$(command -v python3)")"
TARGET_PATHS="tests/unit/unit_kernels_codec_gpu tests/gpu/gpu_staging_test tests/gpu/gpu_worker
  tests/gpu/gpu_api_test tests/gpu/first_contact_worker tests/gpu/gpu_first_contact_test
  tests/gpu/gpu_device_codecs_test tests/gpu/reduce_scatter_gpu_worker
  perf/bench/sketchccl-gpu-codec-bench perf/gpu/sketchccl-stream-stress"
# What the prebuilt binaries must have been made from: every file the build reads.
sources_hash() {
  (cd "$REPO" && find meson.build meson_options.txt meson include src kernels transport compat \
    tests tools perf -type f ! -name '*.md' ! -name '*.py' ! -name '*.sh' \
    ! -path '*/__pycache__/*' -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum |
    cut -c1-16)
}
nvcc_release() { nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'; }
stamp() { echo "sources=$(sources_hash) nvcc=$(nvcc_release) arch=$(uname -m)"; }
PREBUILT=$DEPS/prebuilt
# The run reuses the prebuilt binaries when their stamp is this tree's and this machine's.
PREBUILT_MATCH=0
[ "$MODE" != rehearse ] && [ -f "$PREBUILT/gpucheck.stamp" ] &&
  [ "$(cat "$PREBUILT/gpucheck.stamp")" = "$(stamp)" ] && PREBUILT_MATCH=1
if [ "$PREBUILT_MATCH" -eq 1 ]; then
  P_EST[build]=10
  P_WHAT[build]+=" (here: .gpu_deps/prebuilt, made from this tree by this nvcc release)"
fi

# ---- the plan and its estimate (every mode) -----------------------------------------------------
print_plan() {
  local s est=0 est_pre=0
  for s in build $SECTIONS; do
    est=$((est + P_EST[$s]))
    [ "$s" != build ] && est_pre=$((est_pre + P_EST[$s]))
    detail "plan: $(printf '%-15s timeout %3ss, estimate %3ss: %s' "$s" "${P_TIMEOUT[$s]}" "${P_EST[$s]}" "${P_WHAT[$s]}")"
    [ -n "${P_DEPENDS[$s]:-}" ] && detail "plan:                 depends on: ${P_DEPENDS[$s]}"
  done
  detail "plan: estimate $est s $([ "$PREBUILT_MATCH" -eq 1 ] && echo "reusing .gpu_deps/prebuilt" || echo "with the build on the GPU machine, $((est_pre + 10)) s where .gpu_deps/prebuilt is reused"); deadline $DEADLINE s"
  EST_TOTAL=$est
}
print_plan
if [ "$EST_TOTAL" -gt "$DEADLINE" ]; then
  detail "FAIL: the plan's estimate ($EST_TOTAL s) does not fit the deadline ($DEADLINE s)"
  STATUS[build]=fail
  write_summary "plan does not fit"
  exit 1
fi
if [ "$MODE" = plan ]; then
  write_summary "plan fits ($EST_TOTAL s of $DEADLINE s)"
  exit 0
fi

# ---- the keep-alive process (t=0) ------------------------------------------------------------------
# Loads the driver and holds one CUDA context for the whole run (so that no later process pays
# the driver's start alone), and reads torch and its libraries into the page cache; it changes no
# GPU setting. Its times say what a cold torch import and a first context cost on this machine.
KEEPALIVE_STATE=""
if [ "$MODE" = run ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  python3 -c '
import sys, time
d = sys.argv[1]; t = time.time()
def mark(name):
    open(d + "/" + name, "w").write("%.1f" % (time.time() - t))
import torch
mark("imported")
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
mark("context")
time.sleep(1200)' "$KEEPALIVE_DIR" >>"$LOG" 2>&1 &
  KEEPALIVE_PID=$!
  KEEPALIVE_STATE="pid $KEEPALIVE_PID started at $(elapsed) s"
fi
keepalive_state() {
  [ -n "$KEEPALIVE_PID" ] || return 0
  local st="pid $KEEPALIVE_PID"
  [ -f "$KEEPALIVE_DIR/imported" ] && st+=", torch imported after $(cat "$KEEPALIVE_DIR/imported") s"
  [ -f "$KEEPALIVE_DIR/context" ] && st+=", CUDA context after $(cat "$KEEPALIVE_DIR/context") s"
  kill -0 "$KEEPALIVE_PID" 2>/dev/null || st+=", exited early (gpu_check.log)"
  KEEPALIVE_STATE=$st
}

# ---- environment -----------------------------------------------------------------------------------
{
  echo "date: $(date -u)"
  echo "host: $(uname -a)"
  echo "repo: $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo no git))"
  echo "nvcc: $(command -v nvcc || echo missing)"
  nvcc --version 2>&1 | tail -2
  echo "c++: $(c++ --version 2>&1 | head -1)"
  echo "python3: $(command -v python3) $(python3 --version 2>&1)"
  echo "meson: $(command -v meson || echo missing) $(meson --version 2>/dev/null || true)"
  echo "ninja: $(command -v ninja || echo missing) $(ninja --version 2>/dev/null || true)"
  echo "nccl wheel: $(python3 "$REPO/tools/find_pip_nvidia.py" 2>&1 | tr '\n' ' ')"
  echo "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())' 2>&1 | tail -1)"
  echo "rehearsal namespace: ${GPU_CHECK_REHEARSAL_NS:-none}"
  echo "--- nvidia-smi"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$OUTDIR/env.txt" 2>&1
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  HAVE_GPU=1
  detail "GPU: $(nvidia-smi -L | head -1)"
else
  detail "no GPU (nvidia-smi lists none): every section stops at its first GPU call"
fi

# ---- the build -------------------------------------------------------------------------------------
missing_libs() { # FILE...: the first that does not load (a library it needs is not found)
  local f
  [ -f "$1" ] || { echo "$1 (absent)"; return; }
  command -v ldd >/dev/null || return 0
  for f in "$@"; do
    [ -f "$f" ] || continue
    if LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" 2>&1 |
      grep -q 'not found'; then
      echo "$f ($(ldd "$f" 2>&1 | grep 'not found' | head -1 | xargs))"
      return
    fi
  done
}

build_section() {
  local t0=$SECONDS MESON=meson lib targets pre=$PREBUILT miss
  if [ "$MODE" = run ] && [ -f "$pre/gpucheck.stamp" ]; then
    if [ "$PREBUILT_MATCH" -eq 0 ]; then
      detail "build: .gpu_deps/prebuilt not reused: made from $(cat "$pre/gpucheck.stamp"), here $(stamp)"
    else
      # A copy of the tree may have lost the files' modes.
      # shellcheck disable=SC2086
      (cd "$pre" && for t in $TARGET_PATHS; do [ -f "$t" ] && chmod +x "$t"; done) || true
      # shellcheck disable=SC2086
      miss=$(cd "$pre" && missing_libs libsketchccl.so $TARGET_PATHS)
      if [ -z "$miss" ]; then
        BUILD=$pre
        detail "build: reused .gpu_deps/prebuilt ($(stamp))"
        return 0
      fi
      detail "build: .gpu_deps/prebuilt not reused: $miss"
    fi
  fi
  command -v nvcc >/dev/null || { detail "FAIL build: nvcc not found"; return 2; }
  if ! command -v meson >/dev/null; then
    python3 -c 'import mesonbuild' 2>/dev/null || { detail "FAIL build: no meson"; return 2; }
    MESON="python3 -m mesonbuild.mesonmain"
  fi
  if ! command -v ninja >/dev/null; then
    local nb
    nb=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null || true)
    [ -x "$nb/ninja" ] && export PATH="$PATH:$nb"
    command -v ninja >/dev/null || { detail "FAIL build: no ninja"; return 2; }
  fi
  # GoogleTest: the carried sources, built once into a prefix that the compiler's own search
  # paths reach (Meson then finds it as a system library); else one the system has.
  if [ -f "$DEPS/googletest/googletest/src/gtest-all.cc" ]; then
    local gp=$BUILD-gtest g=$DEPS/googletest/googletest
    if [ ! -f "$gp/lib/libgtest_main.a" ]; then
      log "GoogleTest from $DEPS/googletest into $gp"
      mkdir -p "$gp/obj" "$gp/lib"
      (c++ -std=c++17 -O2 -fPIC -pthread -I"$g/include" -I"$g" -c "$g/src/gtest-all.cc" \
        -o "$gp/obj/gtest-all.o" && ar rcs "$gp/lib/libgtest.a" "$gp/obj/gtest-all.o") >>"$LOG" 2>&1 &
      local p1=$!
      (c++ -std=c++17 -O2 -fPIC -pthread -I"$g/include" -I"$g" -c "$g/src/gtest_main.cc" \
        -o "$gp/obj/gtest_main.o" && ar rcs "$gp/lib/libgtest_main.a" "$gp/obj/gtest_main.o") >>"$LOG" 2>&1
      wait "$p1" || { detail "FAIL build: GoogleTest did not compile (gpu_check.log)"; return 2; }
    fi
    export LIBRARY_PATH="$gp/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export CPLUS_INCLUDE_PATH="$g/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
    detail "GoogleTest: $DEPS/googletest, built in $gp"
  elif [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/src/googletest/googletest/src/gtest-all.cc ]; then
    detail "GoogleTest: the system's"
  else
    detail "FAIL build: no GoogleTest: run perf/gpu/gpu_check.sh --prepare here and carry .gpu_deps"
    return 2
  fi
  # A reused folder whose nccl.h has gone (another wheel, another rehearsal's path) is
  # configured again, so that it looks for it where it is now.
  local setup=() was
  if [ -f "$BUILD/build.ninja" ]; then
    was=$(sed -n 's/^Message: nccl.h: \([^ ]*\) (.*/\1/p' "$BUILD/meson-logs/meson-log.txt" 2>/dev/null | tail -1)
    if [ -z "$was" ] || [ ! -f "$was/nccl.h" ]; then
      setup=(--reconfigure)
      detail "build: the configured nccl.h (${was:-unknown}) has gone: configuring again"
    fi
  fi
  if [ ! -f "$BUILD/build.ninja" ] || [ ${#setup[@]} -gt 0 ]; then
    log "meson setup ${setup[*]} $BUILD"
    if ! $MESON setup "${setup[@]}" "$BUILD" "$REPO" -Dcuda=enabled -Ducx=disabled -Dsm_archs=90 -Ddebug=false \
        -Dwerror=false -Dfuzzers=disabled -Dnccl_home=python -Dtests=enabled >>"$LOG" 2>&1; then
      detail "FAIL build: meson setup (gpu_check.log):"
      grep -E 'ERROR|error' "$LOG" | tail -5 >>"$DETAILS"
      return 2
    fi
  else
    # Meson 1.0 tracks no headers for nvcc: in a reused folder, a header newer than the oldest
    # CUDA object recompiles every CUDA source.
    local oldest
    oldest=$(find "$BUILD" -name '*.cu.o' -printf '%T@ %p\n' 2>/dev/null | sort -n | head -1 | cut -d' ' -f2-)
    if [ -n "$oldest" ] && [ -n "$(find "$REPO/kernels" "$REPO/src" "$REPO/tests/gpu" "$REPO/perf" \
        \( -name '*.h' -o -name '*.cuh' \) -newer "$oldest" 2>/dev/null | head -1)" ]; then
      find "$REPO/kernels" "$REPO/src" "$REPO/tests/gpu" "$REPO/perf" -name '*.cu' -exec touch {} +
    fi
  fi
  detail "build: $(grep -m1 'nccl.h:' "$BUILD/meson-logs/meson-log.txt" 2>/dev/null || echo 'nccl.h: see gpu_check.log')"
  lib=$(ninja -C "$BUILD" -t targets all | sed -n 's/^\(libsketchccl\.so[.0-9]*\): .*/\1/p' | head -1)
  targets="${lib:-libsketchccl.so}"
  for t in $TARGET_PATHS; do
    if ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1; then
      targets+=" $t"
    else
      detail "build: no target $t in this tree (its section will say so)"
    fi
  done
  local t
  t=$(limit "${P_TIMEOUT[build]}")
  # This machine builds far slower than the GPU machine: a rehearsal's build is not timed.
  [ "$MODE" = rehearse ] && t=3600
  log "ninja -j$JOBS $targets (timeout ${t}s)"
  # shellcheck disable=SC2086
  if ! timeout -k 5 "$t" ninja -C "$BUILD" -j "$JOBS" $targets >>"$LOG" 2>&1; then
    detail "FAIL build: ninja, after $((SECONDS - t0)) s of at most ${t} s (gpu_check.log):"
    grep -E '^FAILED|error' "$LOG" | head -8 >>"$DETAILS"
    return 2
  fi
  stamp >"$BUILD/gpucheck.stamp"
  detail "build: ok in $((SECONDS - t0)) s ($BUILD, -Dnccl_home=python -Dwerror=false -Dsm_archs=90 -Ddebug=false)"
}

# ---- helpers for the sections ------------------------------------------------------------------
# The seconds a step may take: its own limit, capped by what the deadline leaves (minus a margin
# for the summary). 0: it would start too late.
# A rehearsal's clock starts after its build: this machine builds far slower than the GPU
# machine, and its sections stop at their first GPU call.
CLOCK0=$START
limit() {
  local own=$1 left
  left=$((DEADLINE - (SECONDS - CLOCK0) - 10))
  [ "$left" -lt 10 ] && { echo 0; return; }
  [ "$own" -gt "$left" ] && own=$left
  echo "$own"
}

# Runs a GoogleTest binary's cases under a timeout: RC (0 passed, 77 skipped: no GPU, 124 timed
# out, else failed) and a one-line tally in LAST. Fails when the filter matched nothing.
LAST=""
gtest_step() { # LABEL TIMEOUT_S ENV... -- BINARY ARGS...
  local label=$1 t=$2 rc n envs=()
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if [ ! -x "$1" ]; then
    LAST="$label: not built"
    return 2
  fi
  if [ "$t" -eq 0 ]; then
    LAST="$label: cut by time"
    return 124
  fi
  n=$("$@" --gtest_list_tests 2>/dev/null | grep -c '^  ' || true)
  if [ "$n" -eq 0 ]; then
    LAST="$label: no test matches the filter"
    return 2
  fi
  echo "=== $label ($n cases, timeout ${t}s${envs:+, ${envs[*]}})" >>"$TESTS"
  rc=0
  env "${envs[@]}" timeout -k 5 "$t" "$@" >>"$TESTS" 2>&1 || rc=$?
  # One line per case ran, "(N ms)" at its end; the lists at the end repeat the names without.
  local ok fail skip
  ok=$(sed -n '/^=== '"$label"' /,$p' "$TESTS" | grep -cE '^\[       OK \] .*\([0-9]+ ms\)$' || true)
  fail=$(sed -n '/^=== '"$label"' /,$p' "$TESTS" | grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' || true)
  skip=$(sed -n '/^=== '"$label"' /,$p' "$TESTS" | grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' || true)
  # A binary that skipped every case but exits 0 has not run either.
  [ "$rc" -eq 0 ] && [ "$ok" -eq 0 ] && [ "$skip" -gt 0 ] && rc=77
  LAST="$label: exit $rc, $n cases: $ok ok, $fail failed, $skip skipped"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && LAST+=" (timed out after ${t}s)"
  sed -n '/^=== '"$label"' /,$p' "$TESTS" | grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' |
    head -12 | sed 's/^/    /' >>"$DETAILS"
  return "$rc"
}

# A section's state (SEC_RESULT) from its steps' exit codes: any failure fails it, all 77 (no
# GPU) skip it.
SEC_RESULT=""
fold() { # RC...
  local rc any=0 all77=1
  for rc in "$@"; do
    [ "$rc" -ne 77 ] && all77=0
    [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && any=1
  done
  if [ "$any" -eq 1 ]; then
    SEC_RESULT=fail
  elif [ "$all77" -eq 1 ]; then
    SEC_RESULT=skip
  else
    SEC_RESULT=pass
  fi
}

B() { echo "$BUILD/$1"; }

# ---- the sections ----------------------------------------------------------------------------------
section_kernels() {
  local rc=0
  gtest_step kernels "$(limit 60)" -- "$(B tests/unit/unit_kernels_codec_gpu)" || rc=$?
  detail "kernels: $LAST"
  fold "$rc"
}

# The staged call on a real stream, with a thread named like the proxy that makes no CUDA call:
# every case, then the hazard, order and chunk cases again under one hardware queue.
section_staging() {
  local x r1=0 r2=0
  x=$(B tests/gpu/gpu_staging_test)
  gtest_step staging "$(limit 35)" -- "$x" || r1=$?
  detail "staging: $LAST"
  gtest_step staging_one_queue "$(limit 25)" CUDA_DEVICE_MAX_CONNECTIONS=1 -- "$x" \
    --gtest_filter='Flags/Hazard.*:Flags/Staged.*:Flags/Chunks.*' || r2=$?
  detail "staging: $LAST"
  fold "$r1" "$r2"
}

# The whole AllReduce on device buffers, standalone: a 2-rank subset first (so that a slow or
# stuck 4-rank case cannot hide whether the path works at all), then the 4-rank cases. Error
# feedback end to end is left out for time.
section_api() {
  local a w r1=0 r2=0
  a=$(B tests/gpu/gpu_api_test)
  w=$(B tests/gpu/gpu_worker)
  gtest_step api_2ranks "$(limit 45)" SKETCHCCL_NCCL_LIB=none -- "$a" "$w" \
    --gtest_filter='GpuApi.*:*EveryRankGetsTheSameResult*/2ranks_none:*EveryRankGetsTheSameResult*/2ranks_q8:*EveryRankGetsTheSameResult*/2ranks_casq3:*EveryRankGetsTheSameResult*/2ranks_s2:*EveryRankGetsTheSameResult*/2ranks_sparse:*EveryRankGetsTheSameResult*/2ranks_auto' || r1=$?
  detail "api: $LAST"
  gtest_step api_4ranks "$(limit 65)" SKETCHCCL_NCCL_LIB=none -- "$a" "$w" \
    --gtest_filter='*EveryRankGetsTheSameResult*/4ranks_*' || r2=$?
  detail "api: $LAST"
  fold "$r1" "$r2"
}

# The second rung (docs/cuda.md): each case runs its calls with the host codecs, then with the
# kernels on the caller's stream, and wants the same bytes on every rank (the in-front cases need
# the fake NCCL, not built here: they skip); then the hazards' stream_stress with every call on
# the second rung (its statistics say so) under one hardware queue, the application thread on.
section_device_codecs() {
  local r1=0
  gtest_step device_codecs "$(limit 55)" -- "$(B tests/gpu/gpu_device_codecs_test)" \
    "$(B tests/gpu/gpu_worker)" "$(B tests/gpu/reduce_scatter_gpu_worker)" \
    --gtest_filter='*_2ranks_q8:*_2ranks_bf16:*_2ranks_q4r:*_4ranks_q8:DeviceCodecsOrder.*:-*InFront*' ||
    r1=$?
  detail "device_codecs: $LAST"
  stress_run "device_codecs: stream_stress on the second rung, CUDA_DEVICE_MAX_CONNECTIONS=1" \
    "$(limit 30)" SKETCHCCL_DEVICE_CODECS=device CUDA_DEVICE_MAX_CONNECTIONS=1 -- --priority mixed
  fold "$r1" "$STRESS_RC"
}

# The launcher puts the inherited environment before a test's own and getenv takes the first, so
# a variable exported here overrides the test's: SKETCHCCL_CODEC=none only where the test checks
# exact sums, never for FirstCall (every codec would silently run none).
# Optional steps (a case the tree may not have yet) say so and do not fail the section.
section_first_contact() {
  local fc w r=() rc names first rest q8
  fc=$(B tests/gpu/gpu_first_contact_test)
  w=$(B tests/gpu/first_contact_worker)
  # "SUITE.CASE PARAM" per case (PARAM: GetParam()'s value, else empty).
  names=$("$fc" "$w" --gtest_list_tests 2>/dev/null | awk '/^[^ ]/{s=$1}
    /^  /{v=$0; sub(/.*GetParam\(\) = /, "", v); if (v == $0) v = ""; gsub(/"/, "", v); print s $1, v}' || true)
  # The codecs most likely to meet trouble first: q8 casq3 s2 sparse, then every other
  # FirstCall case.
  first=$(echo "$names" | awk '$1 ~ /FirstCall/ && ($2 ~ /^(q8|casq3|s2|sparse)$/ ||
    $1 ~ /_(q8|casq3|s2|sparse)$/) {print $1}' | paste -sd: - || true)
  rest=$(echo "$names" | awk '$1 ~ /FirstCall/ {print $1}' | grep -vxF -f <(echo "$first" | tr : '\n') |
    paste -sd: - || true)
  rc=0; gtest_step first_call "$(limit 40)" -- "$fc" "$w" --gtest_filter="${first:-*FirstCall*}" || rc=$?
  r+=("$rc"); detail "first_contact: $LAST"
  if [ -n "$rest" ]; then
    rc=0; gtest_step first_call_rest "$(limit 40)" -- "$fc" "$w" --gtest_filter="$rest" || rc=$?
    r+=("$rc"); detail "first_contact: $LAST"
  fi
  if echo "$names" | grep -q 'Pinned'; then
    rc=0; gtest_step pinned "$(limit 20)" -- "$fc" "$w" --gtest_filter='*Pinned*' || rc=$?
    r+=("$rc"); detail "first_contact: $LAST"
  else
    detail "first_contact: no FirstCall case with a pinned buffer in this tree (not run)"
  fi
  rc=0; gtest_step exact_sums "$(limit 30)" SKETCHCCL_CODEC=none -- "$fc" "$w" \
    --gtest_filter='*TwoCommunicators*:*GraphCaptured*' || rc=$?
  r+=("$rc"); detail "first_contact: $LAST"
  rc=0; gtest_step buckets_abort "$(limit 30)" -- "$fc" "$w" \
    --gtest_filter='*LargerBuckets*:*AbortDuring*' || rc=$?
  r+=("$rc"); detail "first_contact: $LAST"
  # Launches that wait for their kernel (CUDA_LAUNCH_BLOCKING=1, also what compute-sanitizer and
  # ncu do): the same path, no separate mode. A held first call of q8 under it, and the tree's
  # own launch-blocking case if it has one; a timeout is a deadlock.
  q8=$(echo "$names" | awk '$1 ~ /FirstCall/ && ($2 == "q8" || $1 ~ /_q8$/) {print $1; exit}' || true)
  local lb="$q8"
  echo "$names" | grep -q 'LaunchBlocking' && lb+="${lb:+:}*LaunchBlocking*"
  if [ -z "$lb" ]; then
    detail "first_contact: no q8 FirstCall case and no LaunchBlocking case for CUDA_LAUNCH_BLOCKING=1"
    r+=(2)
  else
    rc=0; gtest_step launch_blocking "$(limit 30)" CUDA_LAUNCH_BLOCKING=1 -- "$fc" "$w" \
      --gtest_filter="$lb" || rc=$?
    r+=("$rc"); detail "first_contact: $LAST"
    case $rc in 124 | 137) detail "first_contact: CUDA_LAUNCH_BLOCKING=1 timed out: a held first call deadlocks when launches block" ;; esac
  fi
  fold "${r[@]}"
}

# sketchccl-stream-stress, one run: LABEL TIMEOUT ENV... -- ARGS...; RC, and its RESULT line in
# the details. stress.txt keeps every run's output.
STRESS_RC=0
stress_run() {
  local label=$1 t=$2 envs=() x out=$OUTDIR/stress.txt
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  x=$(B perf/gpu/sketchccl-stream-stress)
  STRESS_RC=0
  if [ ! -x "$x" ]; then
    detail "$label: not built (perf/gpu/sketchccl-stream-stress)"
    STRESS_RC=2
    return
  fi
  if [ "$t" -lt 15 ]; then
    detail "$label: cut by time"
    STRESS_RC=124
    return
  fi
  echo "=== $label (timeout ${t}s${envs:+, ${envs[*]}}) $*" >>"$out"
  local t0=$SECONDS n0
  n0=$(wc -l <"$out")
  # The program kills its own ranks after --timeout; timeout(1) is the backstop. Its 4 MiB calls
  # go in 16 chunks of 256 KiB each way (docs/cuda.md, "Chunks"): every chunk's flags meet the
  # hazards.
  env SKETCHCCL_STAGE_CHUNK_BYTES=262144 "${envs[@]}" SKETCHCCL_TIMEOUT=15 SKETCHCCL_TRANSPORT=socket \
    timeout -k 5 "$t" "$x" --wait "$((t - 12))" --timeout "$((t - 6))" "$@" >>"$out" 2>&1 ||
    STRESS_RC=$?
  # This run's lines only (stress.txt keeps every run's).
  detail "$label: exit $STRESS_RC in $((SECONDS - t0)) s: $(tail -n +"$((n0 + 1))" "$out" | grep '^RESULT' | tail -1)"
  tail -n +"$((n0 + 1))" "$out" | grep -E '^rank [0-9]+: (RESULT|killed)' | cut -c1-400 |
    sed 's/^/    /' >>"$DETAILS" || true
}

# The hazards of review 3 section 3 on the staged path, standalone, 2 ranks on the GPU, 64
# application streams and the application thread (cudaFree(cudaMalloc(64 MiB)), a 64 MiB
# pageable D2H, cudaHostAlloc/cudaFreeHost) in every run: the hardware queues CUDA gives
# (CUDA_DEVICE_MAX_CONNECTIONS unset, 1, 32), every application stream at the greatest priority,
# and a control without the application thread (to name the hazard should the others hang).
section_hazards() {
  local r=() c
  for c in unset 1 32; do
    if [ "$c" = unset ]; then
      stress_run "hazards: CUDA_DEVICE_MAX_CONNECTIONS unset" "$(limit 30)" -- --priority mixed
    else
      stress_run "hazards: CUDA_DEVICE_MAX_CONNECTIONS=$c" "$(limit 30)" \
        CUDA_DEVICE_MAX_CONNECTIONS="$c" -- --priority mixed
    fi
    r+=("$STRESS_RC")
  done
  stress_run "hazards: all 64 streams at the greatest priority, CUDA_DEVICE_MAX_CONNECTIONS=1" \
    "$(limit 30)" CUDA_DEVICE_MAX_CONNECTIONS=1 -- --priority greatest
  r+=("$STRESS_RC")
  stress_run "hazards: control, no application thread" "$(limit 25)" -- --no-app-thread
  r+=("$STRESS_RC")
  fold "${r[@]}"
}

# In front of the wheel's real NCCL (per-rank NCCL_HOSTID, sockets on lo): each round an int32
# AllReduce, which the policy forwards to NCCL, right behind a float one SketchCCL takes over,
# on the same stream; the sums of both, calls_taken and calls_forwarded, proxy_cuda_calls 0.
section_in_front() {
  local lib dir r=()
  dir=$(python3 "$REPO/tools/find_pip_nvidia.py" 2>/dev/null | sed -n 's/^nccl=//p' | head -1)
  lib=$(ls "$dir"/lib/libnccl.so* 2>/dev/null | head -1 || true)
  if [ -z "$lib" ]; then
    detail "in_front: no libnccl.so in the NCCL wheel (${dir:-no wheel found})"
    SEC_RESULT=fail
    return
  fi
  detail "in_front: NCCL $lib"
  stress_run "in_front: CUDA_DEVICE_MAX_CONNECTIONS unset" "$(limit 35)" SKETCHCCL_NCCL_LIB="$lib" \
    NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN -- --in-front --iters 10
  r+=("$STRESS_RC")
  stress_run "in_front: CUDA_DEVICE_MAX_CONNECTIONS=1" "$(limit 35)" SKETCHCCL_NCCL_LIB="$lib" \
    NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN CUDA_DEVICE_MAX_CONNECTIONS=1 -- \
    --in-front --iters 10
  r+=("$STRESS_RC")
  fold "${r[@]}"
}

section_ddp_nccl() {
  local t rc=0 mode=()
  t=$(limit 180)
  [ "$MODE" = rehearse ] && mode=(--rehearse)
  echo "=== torch_ddp_check.py ${mode[*]} (timeout ${t}s)" >>"$OUTDIR/ddp.txt"
  PYTHONUNBUFFERED=1 timeout -k 5 "$t" python3 "$REPO/perf/gpu/torch_ddp_check.py" "${mode[@]}" \
    --lib "$BUILD/libsketchccl.so" --timeout "$((t / 4 - 3))" >>"$OUTDIR/ddp.txt" 2>&1 || rc=$?
  grep -E '^(PASS|FAIL|SKIP|RESULT|step time|plumbing)' "$OUTDIR/ddp.txt" | sed 's/^/    /' >>"$DETAILS"
  detail "ddp_nccl: exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after ${t}s)")"
  fold "$rc"
}

section_codec_bench() {
  local x t rc=0
  x=$(B perf/bench/sketchccl-gpu-codec-bench)
  [ -x "$x" ] || { detail "codec_bench: not built"; SEC_RESULT=fail; return; }
  t=$(limit 40)
  timeout -k 5 "$t" "$x" --elems 33554432 --iters 10 --json "$OUTDIR/codec_bench.json" \
    >"$OUTDIR/codec_bench.txt" 2>&1 || rc=$?
  if grep -q '^no GPU' "$OUTDIR/codec_bench.txt"; then
    rm -f "$OUTDIR/codec_bench.json"
    detail "codec_bench: $(head -1 "$OUTDIR/codec_bench.txt")"
    SEC_RESULT=skip
    return
  fi
  sed 's/^/    /' "$OUTDIR/codec_bench.txt" | head -14 >>"$DETAILS"
  detail "codec_bench: exit $rc"
  fold "$rc"
}

# The run's binaries, in the build's layout (their RUNPATH is $ORIGIN-relative), for the GPU
# machine to reuse (.gpu_deps travels with the run).
save_prebuilt() {
  local new=$DEPS/prebuilt.new f t
  rm -rf "$new"
  mkdir -p "$new"
  for f in "$BUILD"/libsketchccl.so*; do
    [ -d "$f" ] || cp -P "$f" "$new/" || return 1
  done
  for t in $TARGET_PATHS; do
    [ -f "$BUILD/$t" ] || continue
    mkdir -p "$new/$(dirname "$t")"
    cp "$BUILD/$t" "$new/$t" || return 1
  done
  find "$new" -type f -exec strip --strip-debug {} + 2>/dev/null || true
  cp "$BUILD/gpucheck.stamp" "$new/" || return 1
  rm -rf "$DEPS/prebuilt"
  mv "$new" "$DEPS/prebuilt"
  detail "saved the run's binaries in $DEPS/prebuilt ($(du -sh "$DEPS/prebuilt" | cut -f1), $(cat "$DEPS/prebuilt/gpucheck.stamp"))"
}

# ---- run -------------------------------------------------------------------------------------------
write_summary
log "build"
rc=0
build_section || rc=$?
SECS[build]=$(elapsed)
detail "time: build ${SECS[build]} s (estimate ${P_EST[build]} s)"
if [ "$rc" -ne 0 ]; then
  STATUS[build]=fail
  write_summary "build FAILED"
  exit 2
fi
STATUS[build]=pass
[ "$MODE" = rehearse ] && CLOCK0=$SECONDS
write_summary
for s in $SECTIONS; do
  if [ "$(limit "${P_TIMEOUT[$s]}")" -lt "$((P_EST[$s] / 2 > 10 ? P_EST[$s] / 2 : 10))" ]; then
    STATUS[$s]=cut
    detail "$s: cut by time ($((SECONDS - CLOCK0)) s of $DEADLINE s gone)"
    write_summary
    continue
  fi
  log "section $s"
  t0=$SECONDS
  SEC_RESULT=fail
  # Called in a list, so that an unexpected failure inside ends the section, not the run.
  "section_$s" || true
  SECS[$s]=$((SECONDS - t0))
  detail "time: $s ${SECS[$s]} s (estimate ${P_EST[$s]} s, timeout ${P_TIMEOUT[$s]} s)"
  # In a rehearsal a step that reaches its GPU call skips: that is what it must do there. On a
  # GPU machine a skip means a step did not find the GPU: a failure.
  if [ "$MODE" = run ] && [ "$HAVE_GPU" -eq 1 ] && [ "$SEC_RESULT" = skip ]; then
    detail "$s: skipped although nvidia-smi lists a GPU"
    SEC_RESULT=fail
  fi
  STATUS[$s]=$SEC_RESULT
  write_summary
done

# The keep-alive process ends here, by its PID.
if [ -n "$KEEPALIVE_PID" ]; then
  keepalive_state
  stop_keepalive
  KEEPALIVE_STATE+=", ended by its PID at $(elapsed) s"
fi
failed=0
for s in $SECTIONS; do
  case ${STATUS[$s]} in fail | cut) failed=1 ;; esac
done
if [ "$MODE" = rehearse ]; then
  if [ "$failed" -eq 0 ]; then
    if [ "$BUILD" != "$DEPS/prebuilt" ] && [ "${GPU_CHECK_SAVE_PREBUILT:-1}" = 1 ]; then
      save_prebuilt || detail "could not save $DEPS/prebuilt"
    fi
    write_summary "rehearsal ok: built, every section reached its GPU call"
    exit 0
  fi
  write_summary "rehearsal FAILED"
  exit 1
fi
if [ "$HAVE_GPU" -eq 0 ]; then
  write_summary "no GPU: built, nothing measured"
  exit 3
fi
if [ "$failed" -eq 0 ]; then
  write_summary ok
  exit 0
fi
write_summary FAILED
exit 1
