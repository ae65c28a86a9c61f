#!/usr/bin/env bash
# ./run demo: the 4-rank AllReduce sweep (1-64 MiB) per codec on an emulated 1 Gbit/s network
# (network namespaces + tc tbf, as root; loopback otherwise), next to Open MPI's MPI_Allreduce,
# then a table, one verdict line per codec, a PNG plot; the same sweep of ReduceScatter (its own
# table and plot, in OUT/reduce_scatter) and of AllGather (its codecs, OUT/allgather); the topology section (2 namespaces as 2 nodes of 2
# ranks: hierarchical q8 and q4 next to the flat q8 ring, the exact ring and Open MPI, with the
# bytes each node's link carried; OUT/topology); the clustered-sparse sweep (embedding-style rows,
# s2, sparse and auto; OUT/clustered); the convergence summary lines (digits, digits sharded,
# text); and the time-to-accuracy lines of DDP-style training (digits-wide, digits-deep, text) with
# their plot (OUT/tta.png), and the short form of the PyTorch one (perf/demo/torch_tta.sh: DDP,
# gloo against SketchCCL's comm hook; OUT/torch-tta*); auto on every emulated link beside the
# exact ring and its fixed codecs (OUT/auto). Last, the current results: one table
# (OUT/results.md) and the whole report (OUT/report.md). Everything goes to OUT: the checkout is
# left as it was. After a full run on the emulated network (OUT/docs-ready), `./run docs`
# (perf/demo/refresh_docs.sh) writes them into the README and docs/perf.md.
#
#   perf/demo/demo.sh BUILD_DIR [--out DIR] [--iters N] [--quick] [--no-convergence]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PERF=$(dirname "$HERE")
BUILD=${1:?usage: perf/demo/demo.sh BUILD_DIR [--out DIR] [--iters N] [--quick] [--no-convergence]}
shift
OUT=$BUILD/demo ITERS=5 MAXB=64M CONV=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --quick) MAXB=8M; shift ;;
    --no-convergence) CONV=0; shift ;;
    *) echo "demo: unknown option '$1'" >&2; exit 2 ;;
  esac
done
CODECS=none,bf16,q8,q4,casq2,s2,sparse
GATHER_CODECS=none,bf16,q8,q4
SWEEP=(-b 1M -e "$MAXB" -f 4 -n "$ITERS" -w 1)
# Embedding-style gradients (perf/bench/perf_inputs.h `clustered`): rows of 64 non-zeros, 1% of
# the rows per rank, half of them from a pool shared across ranks; 4, 16 and 64 MiB.
CLUSTER_CODECS=s2,sparse,auto CLUSTER_DATA=clustered:0.01
CLUSTER_SWEEP=(-b 4M -e "$MAXB" -f 4 -n "$ITERS" -w 1)
mkdir -p "$OUT"
rm -rf "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.md "$OUT"/torch-tta-* "$OUT"/*.txt.err* "$OUT"/reduce_scatter/*.txt* "$OUT"/allgather/*.txt* "$OUT"/topology/*.txt* \
  "$OUT"/clustered/*.txt* "$OUT"/docs-ready 2>/dev/null || true
start=$(date +%s)

if [ "$(id -u)" -eq 0 ] && ip netns add scclprobe 2>/dev/null; then
  ip netns del scclprobe
  MODE=netem
  echo "== SketchCCL demo: 4 ranks in 4 network namespaces behind a bridge, tc tbf 1 Gbit/s per"
  echo "   link, UCX over tcp; every size compressed (SKETCHCCL_MIN_BYTES=0); Open MPI alongside"
  NETEM=("$HERE/netem.sh" --nranks 4 --topology bridge --rate 1gbit)
else
  MODE=loopback
  echo "== SketchCCL demo: 4 ranks on LOOPBACK (not root, or no network namespaces here)."
  echo "   NOTE: loopback is not a slow network: the links are as fast as memory copies, so this"
  echo "   measures codec CPU cost, not what compression saves on a 1 Gbit/s network. Run as root"
  echo "   for the emulated 1 Gbit/s cluster."
  NETEM=("$HERE/netem.sh" --nranks 4 --loopback)
fi
echo "   sweep: ${SWEEP[*]}; data: gauss for dense codecs, sparse:0.01 (1% dense per rank) for s2 and sparse;"
echo "   then ${CLUSTER_CODECS//,/, } on $CLUSTER_DATA (embedding rows of 64 non-zeros), ${CLUSTER_SWEEP[*]}"
echo

# CPU accounting: how busy the machine was during the sweeps, and how much of it was ours (the
# ranks of 4 processes share the cores; others' work on the machine slows the codecs).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $7 + $8 }' /proc/stat; }
# (`times` runs in this shell, not in a $(...) subshell, so that it sees this shell's children)
read -r busy0 total0 irq0 <<<"$(cpu_ticks)"
times >"$OUT/.times0"
set +e
"${NETEM[@]}" --build "$BUILD" --codecs "$CODECS" --transports ucx --mpi ring,default \
  --out "$OUT" -- "${SWEEP[@]}" >"$OUT/raw.log" 2>"$OUT/raw.err"
rc=$?
# ReduceScatter, the same codecs and sizes (the input's); Open MPI has no baseline here.
mkdir -p "$OUT/reduce_scatter"
"${NETEM[@]}" --build "$BUILD" --codecs "$CODECS" --transports ucx --mpi none \
  --out "$OUT/reduce_scatter" -- "${SWEEP[@]}" --coll reduce_scatter \
  >"$OUT/reduce_scatter/raw.log" 2>"$OUT/reduce_scatter/raw.err"
rc_rs=$?
[ $rc -eq 0 ] && rc=$rc_rs
# AllGather (docs/allgather.md), the codecs it takes (SKETCHCCL_ALLGATHER_CODEC, linear ones) beside
# the exact gather; sizes are the output's.
mkdir -p "$OUT/allgather"
"${NETEM[@]}" --build "$BUILD" --codecs "$GATHER_CODECS" --transports ucx --mpi none \
  --out "$OUT/allgather" -- "${SWEEP[@]}" --coll allgather \
  >"$OUT/allgather/raw.log" 2>"$OUT/allgather/raw.err"
rc_ag=$?
[ $rc -eq 0 ] && rc=$rc_ag
# Clustered-sparse input (embedding rows: the support whose per-slice counts vary most): every
# codec of the list on it; the exact ring of the first sweep is the reference (its busbw does not
# depend on the data).
mkdir -p "$OUT/clustered"
"${NETEM[@]}" --build "$BUILD" --codecs "$CLUSTER_CODECS" --data "$CLUSTER_DATA" \
  --sparse-data "$CLUSTER_DATA" --transports ucx --mpi none --out "$OUT/clustered" \
  -- "${CLUSTER_SWEEP[@]}" >"$OUT/clustered/raw.log" 2>"$OUT/clustered/raw.err"
rc_cl=$?
[ $rc -eq 0 ] && rc=$rc_cl
# Topology (docs/hierarchy.md): 2 nodes x 2 ranks, one 1 Gbit/s link per node. Only namespaces
# make nodes with their own links; on loopback there is nothing to show.
TOPO_SERIES=q8,q4,q8@flat,none@flat
TOPO_MAXB=64M
[ "$MAXB" = 8M ] && TOPO_MAXB=16M
if [ "$MODE" = netem ]; then
  mkdir -p "$OUT/topology"
  "$HERE/netem.sh" --nranks 4 --ranks-per-node 2 --topology bridge --rate 1gbit --build "$BUILD" \
    --codecs "$TOPO_SERIES" --transports ucx --mpi ring --out "$OUT/topology" \
    -- -b 4M -e "$TOPO_MAXB" -f 4 -n 3 -w 1 >"$OUT/topology/raw.log" 2>"$OUT/topology/raw.err"
  rc_topo=$?
  [ $rc -eq 0 ] && rc=$rc_topo
fi
set -e
if [ $rc -ne 0 ]; then
  echo "demo: some runs failed (rc $rc); what did run is reported below. stderr:" >&2
  tail -20 "$OUT/raw.err" >&2
fi
sweep_s=$(($(date +%s) - start))
read -r busy1 total1 irq1 <<<"$(cpu_ticks)"
times >"$OUT/.times1"
ours0=$(awk 'NR == 2 { gsub("m", " "); gsub("s", ""); print $1 * 60 + $2 + $3 * 60 + $4 }' "$OUT/.times0")
ours1=$(awk 'NR == 2 { gsub("m", " "); gsub("s", ""); print $1 * 60 + $2 + $3 * 60 + $4 }' "$OUT/.times1")
rm -f "$OUT/.times0" "$OUT/.times1"
cpu_line=$(awk -v b="$((busy1 - busy0))" -v t="$((total1 - total0))" -v q="$((irq1 - irq0))" \
  -v o0="$ours0" -v o1="$ours1" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN {
    if (t <= 0) exit; busy = 100 * b / t; irq = 100 * q / t; ours = 100 * (o1 - o0) * hz / t
    other = busy - irq - ours; if (other < 0) other = 0
    printf "CPU during the sweeps (%d cores): %.0f%% busy: %.0f%% this demo'"'"'s processes, %.0f%% interrupts (network), %.0f%% other processes on the machine", n, busy, ours, irq, other }')

python3 "$PERF/report/demo_report.py" --dir "$OUT" --mode "$MODE" --codecs "$CODECS" \
  --plot "$OUT/busbw.png" --markdown "$OUT/table.md" --json "$OUT/allreduce.json" \
  --clustered "$OUT/clustered" --clustered-codecs "$CLUSTER_CODECS" --clustered-data "$CLUSTER_DATA"
echo
python3 "$PERF/report/demo_report.py" --dir "$OUT/reduce_scatter" --mode "$MODE" --codecs "$CODECS" \
  --collective reduce_scatter --plot "$OUT/reduce_scatter/busbw.png" \
  --markdown "$OUT/reduce_scatter/table.md" --json "$OUT/reduce_scatter.json" || echo "demo: no ReduceScatter results" >&2
echo
python3 "$PERF/report/demo_report.py" --dir "$OUT/allgather" --mode "$MODE" --codecs "$GATHER_CODECS" \
  --collective allgather --plot "$OUT/allgather/busbw.png" \
  --markdown "$OUT/allgather/table.md" --json "$OUT/allgather.json" || echo "demo: no AllGather results" >&2
if [ "$MODE" = netem ]; then
  echo
  python3 "$PERF/report/topology_report.py" --dir "$OUT/topology" --series "$TOPO_SERIES" \
    --plot "$OUT/topology/busbw.png" --markdown "$OUT/topology/table.md" ||
    echo "demo: no topology results" >&2
else
  echo
  echo "Topology section skipped: it needs network namespaces (root) to make nodes with links."
fi
[ -n "$cpu_line" ] && echo "$cpu_line" && echo "$cpu_line" >>"$OUT/table.md"

# auto on every link the demo emulates (docs/scale.md, "auto and the network"): the exact ring,
# bf16, q8 and auto side by side on the 1 Gbit/s network, the same namespaces unshaped (root) and
# loopback, with the figures and verdict auto measured at init.
echo
echo "auto on each link (exact ring, bf16, q8 on the ring and on two-shot, and auto, 16-64 MiB; auto's measured figures at init):"
mkdir -p "$OUT/auto"
quick_flag=()
[ "$MAXB" = 8M ] && quick_flag=(--quick)
"$HERE/auto_links.sh" "$BUILD" "$OUT/auto" "${quick_flag[@]}" 2>"$OUT/auto/raw.err" ||
  echo "demo: the auto section failed (see $OUT/auto/raw.err)" >&2

if [ "$CONV" = 1 ] && [ -x "$BUILD/perf/train/convergence" ]; then
  echo
  conv_start=$(date +%s)
  # convergence NAME ARGS...: one --short run, its summary line printed, its log kept in OUT.
  convergence() {
    local name=$1
    shift
    SKETCHCCL_NCCL_LIB=none "$BUILD/perf/train/convergence" --short "$@" 2>"$OUT/$name.err" |
      tee "$OUT/$name.txt" | grep '^convergence' ||
      { echo "demo: $name run failed:" >&2; tail -5 "$OUT/$name.err" >&2; }
  }
  if digits=$("$PERF/train/get_digits.sh" "$BUILD/data" 2>"$OUT/digits.err"); then
    convergence convergence --task digits --digits "$digits"
    # Sharded data parallelism: gradients through ncclReduceScatter, exact all-gather.
    convergence convergence-sharded --task digits --digits "$digits" --sharded
  else
    echo "demo: digits convergence skipped: the digits data set is not available ($(cat "$OUT/digits.err"))"
  fi
  # The row-sparse text task: casq2 with and without error feedback against exact.
  convergence convergence-text --task text --configs none,casq2,casq2+ef
  echo "(convergence: $(($(date +%s) - conv_start)) s; per-configuration times in $OUT/convergence*.txt)"
fi

# Time to accuracy (perf/train/ddp-train): DDP-style training, gradients bucketed in reverse layer
# order and each bucket's AllReduce overlapped with the rest of the backward pass, over the same
# network (namespaces, or loopback); one line per configuration, and the accuracy-time plot.
TTA_TASKS=()
if [ "$CONV" = 1 ] && [ -x "$BUILD/perf/train/ddp-train" ]; then
  echo
  tta_start=$(date +%s)
  if [ "$MODE" = netem ]; then
    TTA_RUN=("$HERE/netem.sh" --nranks 4 --topology bridge --rate 1gbit --build "$BUILD" --timeout 900 --exec --
             "$BUILD/perf/train/ddp-train" --netns scclns --label "1 Gbit/s tc tbf, UCX over tcp")
  else
    TTA_RUN=("$HERE/netem.sh" --nranks 4 --loopback --build "$BUILD" --timeout 900 --exec --
             "$BUILD/perf/train/ddp-train" --label "LOOPBACK, not a slow network")
  fi
  echo "Time to accuracy: DDP-style data-parallel training over $([ "$MODE" = netem ] && echo "the emulated 1 Gbit/s network" || echo "LOOPBACK (not a slow network)"),"
  echo "wall-clock training time until the test accuracy reaches the exact run's final accuracy - 0.5 points:"
  # tta NAME ARGS...: one ddp-train run; its summary lines printed, its log and curves kept in OUT.
  tta() {
    local name=$1
    shift
    rm -f "$OUT/tta-$name.csv"
    "${TTA_RUN[@]}" --csv "$OUT/tta-$name.csv" "$@" >"$OUT/tta-$name.txt" 2>"$OUT/tta-$name.err" ||
      { echo "demo: time-to-accuracy $name failed:" >&2; tail -5 "$OUT/tta-$name.err" >&2; }
    grep '^  time-to-accuracy' "$OUT/tta-$name.txt" || true
    TTA_TASKS+=("$name")
  }
  if digits=$("$PERF/train/get_digits.sh" "$BUILD/data" 2>"$OUT/digits.err"); then
    tta digits-wide --task digits-wide --digits "$digits" --epochs 3
    tta digits-deep --task digits-deep --digits "$digits" --epochs 1 --steps 22 --eval-every 5 \
      --configs fp32,bf16,q8,q4+ef
    # Rotated quantizers (docs/codecs.md) beside q4, q8 and bf16, with and without error feedback.
    tta digits-deep-rotated --task digits-deep --digits "$digits" --epochs 1 --steps 22 \
      --eval-every 5 --configs fp32,bf16,q8,q4,q4r,q4r+ef,q2r,q2r+ef
  fi
  # lr 2 (the convergence benchmark trains it at 0.5 for 6 epochs): near its plateau in 1 epoch
  tta text --task text --epochs 1 --lr 2 --configs fp32,bf16,sparse,s2
  if command -v gnuplot >/dev/null; then
    csvs=()
    for t in "${TTA_TASKS[@]}"; do [ -s "$OUT/tta-$t.csv" ] && csvs+=("$OUT/tta-$t.csv"); done
    [ ${#csvs[@]} -gt 0 ] && "$PERF/report/plot_tta.sh" "$OUT/tta.png" "${csvs[@]}" >/dev/null
  fi
  echo "(time to accuracy: $(($(date +%s) - tta_start)) s; per-step compute, exposed communication and library CPU in $OUT/tta-*.txt; plot $OUT/tta.png)"
  # The same question with PyTorch: DDP on a CNN over Fashion-MNIST, gloo's AllReduce against
  # SketchCCL's comm hook (the short form; the full run: perf/demo/torch_tta.sh --full).
  echo
  torch_start=$(date +%s)
  echo "Time to accuracy with PyTorch (DDP, gloo fp32 against SketchCCL's comm hook; validation loss):"
  "$HERE/torch_tta.sh" "$BUILD" "$OUT" || echo "demo: PyTorch time to accuracy failed (log: $OUT/torch-tta-cnn.txt)" >&2
  echo "(PyTorch time to accuracy: $(($(date +%s) - torch_start)) s; log $OUT/torch-tta-cnn.txt, plot $OUT/torch-tta-cnn.png)"
fi

# The current results: the table and the whole report (./run docs copies them into the docs).
python3 "$PERF/report/results_table.py" --allreduce "$OUT/allreduce.json" \
  --reduce-scatter "$OUT/reduce_scatter.json" --accuracy-from "$OUT/tta-digits-wide.txt" \
  --mode "$MODE" --cpu "$cpu_line" --tta "${TTA_TASKS[@]/#/$OUT/tta-}" \
  --out "$OUT/results.md" || echo "demo: no results table" >&2
{
  head -1 "$OUT/results.md" 2>/dev/null
  for part in "AllReduce|table.md" "ReduceScatter|reduce_scatter/table.md" "AllGather|allgather/table.md" \
              "Topology: 2 nodes x 2 ranks|topology/table.md"; do
    if [ -f "$OUT/${part#*|}" ]; then printf '\n#### %s\n\n' "${part%%|*}"; cat "$OUT/${part#*|}"; fi
  done
  conv=$(cd "$OUT" && cat convergence.txt convergence-sharded.txt convergence-text.txt \
    2>/dev/null | grep '^convergence' || true)
  if [ -n "$conv" ]; then printf '\n#### Convergence\n\n```\n%s\n```\n' "$conv"; fi
  tta_lines=$(cd "$OUT" && cat tta-*.txt torch-tta-cnn.txt 2>/dev/null | grep -E '^(==|  )' || true)
  if [ -n "$tta_lines" ]; then printf '\n#### Time to accuracy\n\n```\n%s\n```\n' "$tta_lines"; fi
} >"$OUT/report.md"
echo
if [ "$MODE" = netem ] && [ "$MAXB" = 64M ] && [ "$CONV" = 1 ] && [ $rc -eq 0 ] && [ -s "$OUT/results.md" ]; then
  touch "$OUT/docs-ready"
  echo "demo: './run docs' writes these results into README.md and docs/perf.md, the plots into docs/img/"
else
  echo "demo: not a run for the docs (that takes a full run on the emulated network, all parts"
  echo "      passing, without --quick or --no-convergence)"
fi
echo "demo: wall time $(($(date +%s) - start)) s (sweeps $sweep_s s); tables and logs in $OUT"
exit $rc
