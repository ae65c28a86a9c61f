#!/usr/bin/env bash
# ./run demo: the 4-rank AllReduce sweep (1-64 MiB) per codec on an emulated 1 Gbit/s network
# (network namespaces + tc tbf, as root; loopback otherwise), next to Open MPI's MPI_Allreduce,
# then a table, one verdict line per codec, a PNG plot; the same sweep of ReduceScatter (its own
# table and plot, in OUT/reduce_scatter); the topology section (2 namespaces as 2 nodes of 2
# ranks: hierarchical q8 and q4 next to the flat q8 ring, the exact ring and Open MPI, with the
# bytes each node's link carried; OUT/topology); and the convergence summary lines.
#
#   perf/demo.sh BUILD_DIR [--out DIR] [--iters N] [--quick] [--no-convergence]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: perf/demo.sh BUILD_DIR [--out DIR] [--iters N] [--quick] [--no-convergence]}
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
SWEEP=(-b 1M -e "$MAXB" -f 2 -n "$ITERS" -w 1)
mkdir -p "$OUT"
rm -f "$OUT"/*.txt "$OUT"/*.txt.err* "$OUT"/reduce_scatter/*.txt* "$OUT"/topology/*.txt* \
  2>/dev/null || true
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
echo "   sweep: ${SWEEP[*]}; data: gauss for dense codecs, sparse:0.01 (1% dense per rank) for s2 and sparse"
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

python3 "$HERE/demo_report.py" --dir "$OUT" --mode "$MODE" --codecs "$CODECS" \
  --plot "$OUT/busbw.png" --markdown "$OUT/table.md"
echo
python3 "$HERE/demo_report.py" --dir "$OUT/reduce_scatter" --mode "$MODE" --codecs "$CODECS" \
  --collective reduce_scatter --plot "$OUT/reduce_scatter/busbw.png" \
  --markdown "$OUT/reduce_scatter/table.md" || echo "demo: no ReduceScatter results" >&2
if [ "$MODE" = netem ]; then
  echo
  python3 "$HERE/topology_report.py" --dir "$OUT/topology" --series "$TOPO_SERIES" \
    --plot "$OUT/topology/busbw.png" --markdown "$OUT/topology/table.md" ||
    echo "demo: no topology results" >&2
else
  echo
  echo "Topology section skipped: it needs network namespaces (root) to make nodes with links."
fi
[ -n "$cpu_line" ] && echo "$cpu_line" && echo "$cpu_line" >>"$OUT/table.md"

if [ "$CONV" = 1 ] && [ -x "$BUILD/perf/convergence" ]; then
  echo
  if digits=$("$HERE/get_digits.sh" "$BUILD/data" 2>"$OUT/digits.err"); then
    SKETCHCCL_NCCL_LIB=none "$BUILD/perf/convergence" --task digits --digits "$digits" --short \
      2>"$OUT/convergence.err" | tee "$OUT/convergence.txt" | grep '^convergence' ||
      { echo "demo: convergence run failed:" >&2; tail -5 "$OUT/convergence.err" >&2; }
    # Sharded data parallelism: gradients through ncclReduceScatter, exact all-gather.
    SKETCHCCL_NCCL_LIB=none "$BUILD/perf/convergence" --task digits --digits "$digits" --short \
      --sharded 2>"$OUT/convergence-sharded.err" | tee "$OUT/convergence-sharded.txt" |
      grep '^convergence' ||
      { echo "demo: sharded convergence run failed:" >&2; tail -5 "$OUT/convergence-sharded.err" >&2; }
  else
    echo "demo: convergence skipped: the digits data set is not available ($(cat "$OUT/digits.err"))"
  fi
fi
echo
echo "demo: wall time $(($(date +%s) - start)) s (sweeps $sweep_s s); tables and logs in $OUT"
exit $rc
