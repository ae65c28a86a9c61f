#!/usr/bin/env bash
# perf/gpu/gpu_check.sh [--dry-run] OUTDIR -- the GPU checks of the CUDA backend in one run
# (docs/cuda.md).
#
# For a machine with a GPU, nvcc, meson and ninja but no UCX and no Debian packages (e.g. an
# H200 with CUDA 13 and PyTorch). Within about 5 minutes it configures a build (-Ducx=disabled
# -Dsm_archs=90), builds only the targets it needs, then runs its sections in order:
#   gpu_tests    `meson test --suite gpu` (the CUDA backend against the host backend, the stream
#                gate, the whole AllReduce with 2 and 4 processes on one GPU, bit identity across
#                ranks for every codec, and the first-contact tests: the first call of every codec
#                under a held stream, a second stream under CUDA_DEVICE_MAX_CONNECTIONS=1, a graph
#                captured on another thread, two communicators on two streams, abort while gated)
#                and the codec kernels' own GPU test (tests/unit/unit_kernels_codec_gpu);
#   codec_bench  the GPU codec benchmark (GB/s per codec for encode / in-place step / decode, and
#                each as a fraction of a device-to-device copy of the same run);
#   perf         a 2-rank and a 4-rank sweep of sketchccl-perf on device buffers, standalone;
#   nccl_tests   nccl-tests (NCCL_TESTS_DIR, an MPI build: perf/gpu/gpu_check_nccl_tests.sh), 2 ranks
#                on one GPU through SketchCCL standalone;
#   torch_ddp    PyTorch DDP, 2 ranks on one GPU (perf/gpu/torch_ddp_check.py), when torch imports.
#   The last two run only with at least 60 s of GPU_CHECK_BUDGET left; raise it for them.
# A section is a function section_NAME plus its build targets in SECTION_TARGETS; to add one,
# define both and append NAME to SECTIONS (GPU_CHECK_SECTIONS overrides the list).
#
# It writes every result into OUTDIR, at most 8 files (the device tool brings back 8):
#   summary.txt  gpu_check.log  env.txt  gpu_tests.log  codec_bench.txt  codec_bench.json
#   perf.txt  perf_json.tar.gz
#
# --dry-run (for a machine without a GPU, well under 3 minutes): the environment and tool checks,
# configure if needed, `ninja -n` over every target (they must all exist), each section's plan,
# and, where the test binaries are already built, the GPU suite itself (it skips: exit 77).
#
# Exit status: 0 everything ran and the GPU tests passed (dry run: the plan is consistent); 1 a
# GPU test or benchmark failed; 2 the build could not be configured or built (missing tool,
# GoogleTest, nccl.h: see summary); 3 no GPU here: built as far as possible, GPU tests skipped,
# nothing measured ("no GPU").
#
# Environment: GPU_CHECK_BUILD (build dir, default /tmp/sketchccl-gpu-build; an existing one is
# reused), GPU_CHECK_BUDGET (seconds, default 290: later steps are skipped past it),
# GPU_CHECK_SECTIONS (default "gpu_tests codec_bench perf"), GTEST_SRC (GoogleTest sources, e.g.
# a copy of Debian's /usr/src/googletest carried along; default: .gpu_deps/googletest in the
# repository), JOBS (default: all cores).
set -u
DRY=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY=1
  shift
fi
OUT=${1:?usage: perf/gpu/gpu_check.sh [--dry-run] OUTDIR}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${GPU_CHECK_BUILD:-/tmp/sketchccl-gpu-build}
BUDGET=${GPU_CHECK_BUDGET:-290}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
: >"$SUMMARY"
START=$SECONDS
STATUS=0

log() { echo "[gpu_check +$((SECONDS - START))s] $*" | tee -a "$LOG"; }
note() { echo "$*" | tee -a "$SUMMARY" >>"$LOG"; }
left() { echo $((BUDGET - (SECONDS - START))); }
finish() {
  note "elapsed: $((SECONDS - START)) s; exit status $1"
  exit "$1"
}

# ---- environment ------------------------------------------------------------------------------
export PATH="$PATH:/usr/local/cuda/bin"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
{
  echo "date: $(date -u)"
  echo "host: $(uname -a)"
  echo "repo: $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo no git))"
  echo "nvcc: $(command -v nvcc || echo missing)"; nvcc --version 2>&1 | tail -2
  echo "meson: $(command -v meson || echo missing) $(meson --version 2>/dev/null)"
  echo "ninja: $(command -v ninja || echo missing) $(ninja --version 2>/dev/null)"
  echo "c++: $(c++ --version 2>&1 | head -1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "pkg-config: $(command -v pkg-config || echo missing)"
  echo "--- nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$OUT/env.txt" 2>&1

HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  HAVE_GPU=1
  note "GPU: $(nvidia-smi -L | head -1)"
else
  note "no GPU: nvidia-smi finds none (the build still runs; GPU tests will skip)"
fi

# ---- tools ------------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null; then
  note "FAIL: nvcc not found (PATH and /usr/local/cuda/bin)"
  finish 2
fi
MESON="meson"
if ! command -v meson >/dev/null; then
  if python3 -c 'import mesonbuild' 2>/dev/null; then
    MESON="python3 -m mesonbuild.mesonmain"
  else
    [ "$DRY" -eq 1 ] && { note "FAIL: meson missing"; finish 2; }
    log "meson missing: trying pip (only works where a package index is reachable)"
    timeout 60 python3 -m pip install --user -q meson ninja >>"$LOG" 2>&1 || true
    export PATH="$PATH:$HOME/.local/bin"
    if ! command -v meson >/dev/null; then
      note "FAIL: meson is not installed and pip could not install it"
      finish 2
    fi
  fi
fi
if ! command -v ninja >/dev/null; then
  # The pip package's binary, when its bin folder is not on PATH.
  NB=$(python3 -c 'import ninja, os; print(getattr(ninja, "BIN_DIR", ""))' 2>/dev/null)
  [ -n "$NB" ] && [ -x "$NB/ninja" ] && export PATH="$PATH:$NB"
fi
if ! command -v ninja >/dev/null; then
  note "FAIL: ninja not found (pip install ninja, or carry a binary)"
  finish 2
fi

# nccl.h: /usr/local/cuda/include or /usr/include (meson.build), else PyTorch's wheel.
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ ! -f /usr/include/nccl.h ]; then
  NCCL_INC=$(python3 - <<'PY' 2>/dev/null
import os, importlib.util
for name in ("nvidia.nccl", "nvidia.cu13", "nvidia"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        continue
    for base in (spec.submodule_search_locations or []) if spec else []:
        for root, dirs, files in os.walk(base):
            if "nccl.h" in files:
                print(root); raise SystemExit
PY
)
  if [ -n "${NCCL_INC:-}" ]; then
    export CPATH="$NCCL_INC${CPATH:+:$CPATH}"
    note "nccl.h: $NCCL_INC (from the Python packages, through CPATH)"
  else
    note "FAIL: nccl.h not found (/usr/local/cuda/include, /usr/include, Python nvidia.nccl)"
    finish 2
  fi
fi

# GoogleTest: meson finds a prebuilt one, or the sources in /usr/src/googletest.
have_gtest() {
  [ -f /usr/src/googletest/googletest/src/gtest-all.cc ] || [ -f /usr/src/gtest/src/gtest-all.cc ] ||
    { command -v pkg-config >/dev/null && pkg-config --exists gtest; } ||
    ls /usr/lib/x86_64-linux-gnu/libgtest.* /usr/lib/libgtest.* /usr/local/lib/libgtest.* >/dev/null 2>&1
}
if ! have_gtest; then
  SRC=${GTEST_SRC:-$REPO/.gpu_deps/googletest}
  if [ -f "$SRC/googletest/src/gtest-all.cc" ]; then
    if mkdir -p /usr/src 2>/dev/null && cp -r "$SRC" /usr/src/googletest 2>/dev/null; then
      note "GoogleTest: sources copied from $SRC to /usr/src/googletest (meson builds them)"
    elif command -v cmake >/dev/null; then
      PREFIX=$BUILD-gtest
      log "building GoogleTest from $SRC into $PREFIX"
      cmake -S "$SRC" -B "$PREFIX/build" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
        -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1 &&
        cmake --build "$PREFIX/build" -j "$JOBS" >>"$LOG" 2>&1 &&
        cmake --install "$PREFIX/build" >>"$LOG" 2>&1
      export LIBRARY_PATH="$PREFIX/lib:$PREFIX/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}"
      export CPATH="$PREFIX/include${CPATH:+:$CPATH}"
      export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig:$PREFIX/lib64/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
      note "GoogleTest: built from $SRC into $PREFIX"
    fi
  else
    note "FAIL: GoogleTest not found. Carry its sources: cp -r /usr/src/googletest .gpu_deps/ on a"
    note "      Debian machine, name .gpu_deps in the device tool's carry, or set GTEST_SRC"
    finish 2
  fi
fi

# ---- configure and build ----------------------------------------------------------------------
if [ ! -f "$BUILD/build.ninja" ]; then
  log "meson setup $BUILD"
  if ! $MESON setup "$BUILD" "$REPO" -Dcuda=enabled -Ducx=disabled \
      -Dsm_archs=90 -Dfuzzers=disabled >>"$LOG" 2>&1; then
    note "FAIL: meson setup (see gpu_check.log)"
    tail -30 "$LOG" >>"$SUMMARY"
    finish 2
  fi
else
  # A reused build: Meson 1.0's nvcc rules track no headers, so rebuild every CUDA source.
  [ "$DRY" -eq 0 ] &&
    find "$REPO/kernels" "$REPO/src" "$REPO/tests/gpu" "$REPO/perf" -name '*.cu' -exec touch {} +
fi
# The library's ninja target is its versioned file (libsketchccl.so.X.Y.Z); the .so is a link.
LIB_TARGET=$(ninja -C "$BUILD" -t targets all | sed -n 's/^\(libsketchccl\.so[.0-9]*\): .*/\1/p' | head -1)
SECTIONS=${GPU_CHECK_SECTIONS:-"gpu_tests codec_bench perf nccl_tests torch_ddp"}
declare -A SECTION_TARGETS=(
  [gpu_tests]="tests/gpu/gpu_backend_test tests/gpu/gpu_nodevice_test tests/gpu/gpu_worker
    tests/gpu/gpu_api_test tests/gpu/reduce_scatter_gpu_worker tests/gpu/gpu_reduce_scatter_test
    tests/gpu/first_contact_worker tests/gpu/gpu_first_contact_test
    tests/unit/unit_kernels_codec_gpu tests/gpu/collectives_gpu_worker tests/gpu/gpu_collectives_test
    tests/api/coll_worker"
  [codec_bench]="perf/bench/sketchccl-gpu-codec-bench"
  [perf]="perf/bench/sketchccl-perf"
  [nccl_tests]=""
  [torch_ddp]=""
)
TARGETS="${LIB_TARGET:-libsketchccl.so} perf/bench/sketchccl-gpu-codec-bench"
for S in $SECTIONS; do
  if ! declare -F "section_$S" >/dev/null 2>&1 && ! grep -q "^section_$S()" "$0"; then
    note "FAIL: unknown section $S"
    finish 2
  fi
  TARGETS="$TARGETS ${SECTION_TARGETS[$S]:-}"
done
if [ "$DRY" -eq 1 ]; then
  log "ninja -n (dry run; targets: $(echo $TARGETS))"
  if ! ninja -C "$BUILD" -n $TARGETS >>"$LOG" 2>&1; then
    note "FAIL: a target is unknown to the build (see gpu_check.log)"
    grep -E "unknown target|error" "$LOG" | head -10 >>"$SUMMARY"
    finish 2
  fi
  note "build (dry run): every target known: $(echo $TARGETS)"
else
  log "ninja -j$JOBS (targets: $(echo $TARGETS))"
  if ! ninja -C "$BUILD" -j "$JOBS" $TARGETS >>"$LOG" 2>&1; then
    note "FAIL: build (see gpu_check.log)"
    grep -E "error|FAILED" "$LOG" | head -20 >>"$SUMMARY"
    finish 2
  fi
  note "build: ok after $((SECONDS - START)) s ($BUILD)"
fi
# The CUDA runtime's own answer, in case nvidia-smi is missing or says otherwise.
PROBE="no GPU: benchmark not built (dry run)"
[ -x "$BUILD/perf/bench/sketchccl-gpu-codec-bench" ] &&
  PROBE=$("$BUILD/perf/bench/sketchccl-gpu-codec-bench" --elems 256 --iters 1 --codecs none 2>&1 | head -1)
if [ "$HAVE_GPU" -eq 0 ] && ! echo "$PROBE" | grep -q '^no GPU'; then
  HAVE_GPU=1
  note "GPU (CUDA runtime): $PROBE"
elif [ "$HAVE_GPU" -eq 1 ] && echo "$PROBE" | grep -q '^no GPU'; then
  HAVE_GPU=0
  note "nvidia-smi lists a GPU but the CUDA runtime says: $PROBE"
fi
[ -x "$BUILD/tools/sketchccl-info" ] && "$BUILD/tools/sketchccl-info" 2>&1 |
  sed -n '/^CUDA:/,/^[A-Z]/p' | sed '$d' >>"$OUT/env.txt"

# ---- sections ---------------------------------------------------------------------------------
section_gpu_tests() {
  local T rc
  T=$(left)
  [ "$T" -lt 60 ] && T=60
  if [ "$DRY" -eq 1 ]; then
    note "plan gpu_tests: meson test --suite gpu (timeout ${T}s), then unit_kernels_codec_gpu"
    if [ ! -x "$BUILD/tests/gpu/gpu_first_contact_test" ]; then
      note "  (test binaries not built: plan only)"
      return 0
    fi
  fi
  log "meson test --suite gpu (timeout ${T}s)"
  timeout "$T" $MESON test -C "$BUILD" --no-rebuild --suite gpu --print-errorlogs \
    >"$OUT/gpu_tests.log" 2>&1
  rc=$?
  cat "$BUILD/meson-logs/testlog.txt" >>"$OUT/gpu_tests.log" 2>/dev/null
  grep -E '^ *[0-9]+/[0-9]+ ' "$OUT/gpu_tests.log" | head -20 >>"$SUMMARY"
  # The codec kernels' own GPU-against-CPU test (suite unit, not gpu): run it here too.
  echo "=== tests/unit/unit_kernels_codec_gpu" >>"$OUT/gpu_tests.log"
  if [ -x "$BUILD/tests/unit/unit_kernels_codec_gpu" ]; then
    timeout 120 "$BUILD/tests/unit/unit_kernels_codec_gpu" >>"$OUT/gpu_tests.log" 2>&1
    local urc=$?
    [ "$urc" -ne 0 ] && [ "$urc" -ne 77 ] && rc=1
  fi
  local SKIPS PASSES FAILS
  SKIPS=$(grep -c '\[  SKIPPED \]' "$OUT/gpu_tests.log" || true)
  PASSES=$(grep -c '\[       OK \]' "$OUT/gpu_tests.log" || true)
  FAILS=$(grep -c '\[  FAILED  \]' "$OUT/gpu_tests.log" || true)
  note "gpu tests: meson rc=$rc, gtest cases ok=$PASSES skipped=$SKIPS failed=$FAILS"
  note "first contact: $(grep -E 'FirstC(all|ontact)' "$OUT/gpu_tests.log" | grep -cE '\[       OK \]' || true) ok, $(grep -E 'FirstC(all|ontact)' "$OUT/gpu_tests.log" | grep -cE '\[  FAILED  \]' || true) failed"
  grep '\[  FAILED  \]' "$OUT/gpu_tests.log" | sort -u | head -40 >>"$SUMMARY"
  [ "$rc" -ne 0 ] && STATUS=1
  return 0
}

section_codec_bench() {
  local T
  T=$(left)
  if [ "$DRY" -eq 1 ]; then
    note "plan codec_bench: sketchccl-gpu-codec-bench --json codec_bench.json (timeout ${T}s)"
    return 0
  fi
  if [ "$T" -gt 20 ]; then
    log "codec benchmark (timeout ${T}s)"
    timeout "$T" "$BUILD/perf/bench/sketchccl-gpu-codec-bench" --json "$OUT/codec_bench.json" \
      >"$OUT/codec_bench.txt" 2>&1 || { note "codec benchmark: FAILED or timed out"; STATUS=1; }
    cat "$OUT/codec_bench.txt" >>"$SUMMARY"
  else
    note "codec benchmark: skipped (time budget)"
  fi
}

section_perf() {
  local P C T rc
  if [ "$DRY" -eq 1 ]; then
    note "plan perf: sketchccl-perf --standalone --memory device, 2 and 4 ranks, none q8 q4 casq3 s2 sparse, 1M-64M"
    return 0
  fi
  mkdir -p "$OUT/perf_json"
  : >"$OUT/perf.txt"
  for P in 2 4; do
    for C in none q8 q4 casq3 s2 sparse; do
      T=$(left)
      if [ "$T" -lt 15 ]; then
        note "perf: ${P} ranks $C skipped (time budget)"
        continue
      fi
      [ "$T" -gt 60 ] && T=60
      echo "=== $P ranks, codec $C" >>"$OUT/perf.txt"
      SKETCHCCL_TRANSPORT=socket SKETCHCCL_TIMEOUT=60 timeout "$T" \
        "$BUILD/perf/bench/sketchccl-perf" --standalone --memory device --lib "$BUILD/libsketchccl.so" \
        --nranks "$P" --codec "$C" -b 1M -e 64M -f 4 -n 5 -w 2 -c 1 --wire 0 \
        -J "$OUT/perf_json/perf_${P}r_${C}.json" >>"$OUT/perf.txt" 2>&1
      rc=$?
      echo "(exit $rc)" >>"$OUT/perf.txt"
      [ "$rc" -ne 0 ] && { note "perf: ${P} ranks $C exit $rc"; STATUS=1; }
    done
  done
  tar -czf "$OUT/perf_json.tar.gz" -C "$OUT" perf_json 2>/dev/null && rm -rf "$OUT/perf_json"
  grep -v '^#' "$OUT/perf.txt" | tail -60 >>"$SUMMARY"
}

# Real clients: nccl-tests and PyTorch DDP, 2 ranks on one GPU, standalone (their output goes to
# gpu_check.log, their RESULT lines to summary.txt; exit 77 from either: skipped, says why).
run_client_part() {
  local part=$1 T rc
  T=$(left)
  if [ "$DRY" -eq 1 ]; then
    note "plan $part: $([ "$part" = nccl_tests ] && echo 'perf/gpu/gpu_check_nccl_tests.sh (NCCL_TESTS_DIR)' || echo 'perf/gpu/torch_ddp_check.py') if >= 60 s are left"
    return 0
  fi
  if [ "$T" -lt 60 ]; then
    note "$part: skipped (time budget; raise GPU_CHECK_BUDGET)"
    return 0
  fi
  if [ "$part" = nccl_tests ]; then
    RUN_TIMEOUT=$((T / 10 > 30 ? T / 10 : 30)) timeout "$T" \
      "$REPO/perf/gpu/gpu_check_nccl_tests.sh" "$BUILD/libsketchccl.so" >"$OUT/part.txt" 2>&1
  else
    timeout "$T" python3 "$REPO/perf/gpu/torch_ddp_check.py" --lib "$BUILD/libsketchccl.so" \
      --timeout "$((T / 2))" >"$OUT/part.txt" 2>&1
  fi
  rc=$?
  cat "$OUT/part.txt" >>"$LOG"
  grep -E '^(RESULT|PASS|FAIL|step time|nccl-tests: skipped|torch_ddp_check: skipped)' \
    "$OUT/part.txt" >>"$SUMMARY"
  rm -f "$OUT/part.txt"
  case $rc in
    0) note "$part: ok" ;;
    77) note "$part: skipped" ;;
    *) note "$part: FAILED (exit $rc)"; STATUS=1 ;;
  esac
}
section_nccl_tests() { run_client_part nccl_tests; }
section_torch_ddp() { run_client_part torch_ddp; }

# ---- run the sections -----------------------------------------------------------------------------
if [ "$HAVE_GPU" -eq 0 ] && [ "$DRY" -eq 0 ]; then
  section_gpu_tests
  [ -x "$BUILD/perf/bench/sketchccl-gpu-codec-bench" ] &&
    "$BUILD/perf/bench/sketchccl-gpu-codec-bench" >"$OUT/codec_bench.txt" 2>&1
  note "codec benchmark: $(head -1 "$OUT/codec_bench.txt" 2>/dev/null)"
  note "perf sweep: skipped (no GPU)"
  note "nccl-tests, torch DDP: skipped (no GPU)"
  note "RESULT: no GPU -- built, GPU tests skipped, nothing measured"
  finish 3
fi
for S in $SECTIONS; do
  log "section $S"
  "section_$S"
done
if [ "$DRY" -eq 1 ]; then
  note "RESULT: dry run $([ $STATUS -eq 0 ] && echo ok || echo 'with failures, see above')"
  finish "$STATUS"
fi
note "RESULT: $([ $STATUS -eq 0 ] && echo ok || echo failures, see above)"
finish "$STATUS"
