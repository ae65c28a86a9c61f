#!/usr/bin/env bash
# Writes a demo run's results into the checkout: results.md into the README (between its
# demo-results markers), report.md into docs/perf.md (demo-report), the plots into docs/img/.
# Only a run that qualifies (demo.sh left OUT/docs-ready: a full run on the emulated network, all
# parts passing, without --quick or --no-convergence); `./run docs` calls it on build/demo.
#   perf/demo/refresh_docs.sh [OUT_DIR]     (default build/demo)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PERF=$(dirname "$HERE")
REPO=$(dirname "$PERF")
OUT=${1:-$REPO/build/demo}
if [ ! -f "$OUT/docs-ready" ]; then
  echo "refresh_docs: $OUT holds no run to write into the docs (it takes a full ./run demo on the"
  echo "              emulated network, all parts passing, without --quick or --no-convergence)"
  exit 0
fi
python3 "$PERF/report/results_table.py" --splice "$REPO/README.md" demo-results --text "$OUT/results.md"
python3 "$PERF/report/results_table.py" --splice "$REPO/docs/perf.md" demo-report --text "$OUT/report.md"
for png in busbw:demo-busbw reduce_scatter/busbw:reduce-scatter-busbw topology/busbw:topology-busbw \
           tta:time-to-accuracy; do
  if [ -f "$OUT/${png%%:*}.png" ]; then cp "$OUT/${png%%:*}.png" "$REPO/docs/img/${png#*:}.png"; fi
done
echo "refresh_docs: the results of $OUT written into README.md and docs/perf.md, the plots into docs/img/"
