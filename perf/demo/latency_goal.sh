#!/usr/bin/env bash
# The latency goal of docs/scale.md ("One message round per phase"): on the emulated network
# (netem.sh: 4 ranks behind a bridge, tc tbf 1 Gbit/s, the socket transport), the time per call
# of a fixed codec (q8, q4), the same codec under the accuracy guard (SKETCHCCL_MAX_NMSE set high
# enough that it never steps: what the guard's estimate and agreement cost), and `auto`, side by
# side in one run, at 64 KiB to 1 MiB with SKETCHCCL_MIN_BYTES=0. Prints a markdown table; `auto`
# is set against the fixed run of the codec it ran (sketchccl-perf's codec column: what its
# decision costs) and against the faster of q8 and q4 (what its choice of codec gains or loses).
#
#   perf/demo/latency_goal.sh [--build DIR] [--algo auto|ring|twoshot] [--iters N] [--rounds R]
#
# Every configuration runs R times (default 2) in turn; the table has the median of the rounds'
# times per call (each the mean of N timed calls). Needs root (netem.sh's namespaces).
set -euo pipefail

BUILD=build ALGO=auto COLL=allreduce ITERS=20 ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=${2:?}; shift 2 ;;
    --algo) ALGO=${2:?}; shift 2 ;;
    --coll) COLL=${2:?}; shift 2 ;;
    --iters) ITERS=${2:?}; shift 2 ;;
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "latency_goal.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$ITERS" =~ ^[0-9]+$ ]] && [ "$ITERS" -ge 1 ] || { echo "--iters: a positive count" >&2; exit 2; }
case "$COLL" in allreduce|reduce_scatter) ;; *) echo "--coll: allreduce or reduce_scatter" >&2; exit 2 ;; esac
[[ "$ROUNDS" =~ ^[0-9]+$ ]] && [ "$ROUNDS" -ge 1 ] || { echo "--rounds: a positive count" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/sccl-latency.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# One configuration: LABEL CODECS [ENV...]; rows "LABEL CODEC BYTES US" into $WORK/rows.
run_config() {
  local label=$1 codecs=$2; shift 2
  local out=$WORK/$label.$round
  env SKETCHCCL_ALGO="$ALGO" SKETCHCCL_MIN_BYTES=0 "$@" "$HERE/netem.sh" --build "$BUILD" \
    --codecs "$codecs" --transports socket --mpi none -- --coll "$COLL" -b 64K -e 1M -f 2 -n "$ITERS" -w 3 \
    >"$out" 2>"$out.err" || { cat "$out" "$out.err" >&2; exit 1; }
  awk -v l="$label" '$1 ~ /^socket-/ { c = $1; sub(/^socket-/, "", c); print l, c, $2, $7, $14 }' \
    "$out" >>"$WORK/rows"
}

echo "# $(uptime)" >&2
for ((round = 0; round < ROUNDS; round++)); do
  run_config fixed q8,q4
  run_config guard q8,q4 SKETCHCCL_MAX_NMSE=1000
  run_config auto auto
done

# Median over the rounds per (label, codec, size), then the table.
sort -k1,1 -k2,2 -k3,3n -k4,4n "$WORK/rows" | awk -v algo="$ALGO" -v coll="$COLL" '
  { k = $1 " " $2 " " $3; v[k, ++n[k]] = $4; keys[k] = 1; ran[k, $5]++ }
  END {
    for (k in keys) {
      m = n[k]; med[k] = (m % 2) ? v[k, (m + 1) / 2] : (v[k, m / 2] + v[k, m / 2 + 1]) / 2
    }
    # The codec `auto` ran most often over the rounds at each size: its fixed run is the reference.
    for (kc in ran) {
      split(kc, part, SUBSEP)
      if (ran[kc] > most[part[1]]) { most[part[1]] = ran[kc]; chose[part[1]] = part[2] }
    }
    printf "%s, SKETCHCCL_ALGO=%s, time per call in µs (median of the rounds):\n\n", coll, algo
    print "| size | q8 | q8 + guard | guard / q8 | q4 | q4 + guard | guard / q4 | auto | auto ran | auto / that codec | auto / min(q8, q4) |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (b = 65536; b <= 1048576; b *= 2) {
      f8 = med["fixed q8 " b]; g8 = med["guard q8 " b]; f4 = med["fixed q4 " b]
      g4 = med["guard q4 " b]; a = med["auto auto " b]
      if (f8 == "" || f4 == "") continue
      lo = f8 < f4 ? f8 : f4
      c = chose["auto auto " b]; ref = med["fixed " c " " b]
      same = ref == "" ? "-" : sprintf("%.2f", a / ref)
      printf "| %d KiB | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %s | %s | %.2f |\n", \
        b / 1024, f8, g8, g8 / f8, f4, g4, g4 / f4, a, c, same, a / lo
    }
  }'
