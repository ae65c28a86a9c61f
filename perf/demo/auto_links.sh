#!/usr/bin/env bash
# auto on every link the demo emulates (docs/scale.md, "auto and the network"): the exact ring, the
# fixed codecs auto may choose (q8, the dense codec, on the ring and on two-shot, and bf16, its
# safer rung) and auto, side by side on 4 ranks, 16-64 MiB: on the 1 Gbit/s tbf network, behind a
# 20 Gbit/s shaper (the cores the limit) and unshaped on the same namespaces (as root), and on
# loopback (always). auto logs its measured figures and verdict at init; the
# report (perf/report/auto_links_report.py) puts them next to the busbw it reached.
#
#   perf/demo/auto_links.sh BUILD_DIR OUT_DIR [--quick]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: perf/demo/auto_links.sh BUILD_DIR OUT_DIR [--quick]}
OUT=${2:?usage: perf/demo/auto_links.sh BUILD_DIR OUT_DIR [--quick]}
ITERS=5
[ "${3:-}" = --quick ] && ITERS=2
CODECS=none,bf16,q8@ring,q8@twoshot
SWEEP=(-b 16M -e 64M -f 2 -n "$ITERS" -w 1)
LINKS=()
run_link() {  # NAME NETEM-ARGS...
  local name=$1
  shift
  mkdir -p "$OUT/$name"
  rm -f "$OUT/$name"/*.txt*
  SKETCHCCL_DEBUG=INFO SKETCHCCL_DEBUG_SUBSYS=INIT "$HERE/netem.sh" --nranks 4 "$@" \
    --build "$BUILD" --codecs "$CODECS,auto" --transports ucx --mpi none --out "$OUT/$name" \
    -- "${SWEEP[@]}" >"$OUT/$name/raw.log" 2>"$OUT/$name/raw.err" ||
    echo "auto_links: the $name runs failed (see $OUT/$name/raw.err)" >&2
  LINKS+=("$name")
}
if [ "$(id -u)" -eq 0 ] && ip netns add scclprobe 2>/dev/null; then
  ip netns del scclprobe
  run_link tbf-1gbit --topology bridge --rate 1gbit
  run_link tbf-20gbit --topology bridge --rate 20gbit  # a shaper above what the cores move
  run_link unshaped --topology bridge --rate none
fi
run_link loopback --loopback
python3 "$(dirname "$HERE")/report/auto_links_report.py" --dir "$OUT" \
  --links "$(IFS=,; echo "${LINKS[*]}")" --codecs "$CODECS" --markdown "$OUT/table.md"
