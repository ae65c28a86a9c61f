#!/usr/bin/env bash
# Time to accuracy with PyTorch (perf/train/torch_tta.py): DDP over 4 ranks, gloo's fp32
# AllReduce against SketchCCL's DDP communication hook per codec, on the emulated 1 Gbit/s
# network (4 namespaces of netem.sh, as root; loopback otherwise, and it says so). Results in
# OUT: torch-tta-MODEL.txt (the run's lines), .csv (the curves), .png (plot_tta.sh --loss).
#
#   perf/demo/torch_tta.sh BUILD_DIR OUT_DIR [--full] [--docs] [--prefix P]
#
# Default, the short form ./run demo runs: the CNN on Fashion-MNIST, fp32 (gloo), q8 and q4+ef,
# seed 1, 40 steps (about 1.5 minutes). --full: both models (the GPT-style LM on the Python standard
# library's source, the CNN), every configuration, seeds 1 and 2: docs/perf.md's figures (about 35
# minutes on the 2-core reference machine). --docs (with --full): afterwards, the plots into
# docs/img/ and the runs' lines into docs/perf.md (torch-tta markers). --prefix: the namespaces'
# names (netem.sh --prefix; default scclns).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PERF=$(dirname "$HERE")
REPO=$(dirname "$PERF")
BUILD=${1:?usage: perf/demo/torch_tta.sh BUILD_DIR OUT_DIR [--full] [--docs] [--prefix P]}
OUT=${2:?usage: perf/demo/torch_tta.sh BUILD_DIR OUT_DIR [--full] [--docs] [--prefix P]}
shift 2
FULL=0 DOCS=0 PREFIX=scclns
while [ $# -gt 0 ]; do
  case "$1" in
    --full) FULL=1; shift ;;
    --docs) DOCS=1; shift ;;
    --prefix) PREFIX=${2:?}; shift 2 ;;
    *) echo "torch_tta.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ "$DOCS" = 0 ] || [ "$FULL" = 1 ] || { echo "torch_tta.sh: --docs takes a --full run" >&2; exit 2; }
if ! py=$(for p in ${SKETCHCCL_TORCH_PYTHON:-} python3 /usr/bin/python3; do
            "$p" -c 'import torch.distributed' 2>/dev/null && { echo "$p"; break; }
          done) || [ -z "$py" ]; then
  echo "PyTorch time to accuracy skipped: no Python here imports torch (apt-get install python3-torch)"
  exit 0
fi
mkdir -p "$OUT"
if [ "$FULL" = 1 ]; then
  MODELS=(lm cnn) ARGS=(--seeds 1,2 --configs compute,fp32,none,bf16,q8,q4+ef,auto)
else
  MODELS=(cnn) ARGS=(--seeds 1 --configs fp32,q8,q4+ef --steps 40)
fi
if [ "$(id -u)" -eq 0 ] && ip netns add "${PREFIX}probe" 2>/dev/null; then
  ip netns del "${PREFIX}probe"
  RUN=("$HERE/netem.sh" --nranks 4 --topology bridge --rate 1gbit --build "$BUILD" --prefix "$PREFIX"
       --timeout 3600 --exec --)
  ARGS+=(--netns "$PREFIX" --label "1 Gbit/s tc tbf per link, 4 namespaces")
else
  RUN=()
fi
export SKETCHCCL_PYTHONPATH=$BUILD/python SKETCHCCL_TORCH_PYTHON=$py
rc=0
for m in "${MODELS[@]}"; do
  rm -rf "$OUT/torch-tta-$m"
  "${RUN[@]}" "$py" "$PERF/train/torch_tta.py" --model "$m" --build "$BUILD" "${ARGS[@]}" \
    --csv "$OUT/torch-tta-$m.csv" --out "$OUT/torch-tta-$m" >"$OUT/torch-tta-$m.txt" 2>&1 || rc=1
  grep -E '^(==|   time-to-accuracy|   CPU)' "$OUT/torch-tta-$m.txt" || tail -5 "$OUT/torch-tta-$m.txt"
  if command -v gnuplot >/dev/null && [ -s "$OUT/torch-tta-$m.csv" ]; then
    "$PERF/report/plot_tta.sh" --loss "$OUT/torch-tta-$m.png" "$OUT/torch-tta-$m.csv" >/dev/null || rc=1
  fi
done
if [ "$DOCS" = 1 ] && [ $rc -eq 0 ]; then
  for m in "${MODELS[@]}"; do
    cp "$OUT/torch-tta-$m.png" "$REPO/docs/img/torch-tta-$m.png"
    { echo '```'; grep -E '^(==|   )' "$OUT/torch-tta-$m.txt"; echo '```'; } >"$OUT/torch-tta-$m.md"
    python3 "$PERF/report/results_table.py" --splice "$REPO/docs/perf.md" "torch-tta-$m" \
      --text "$OUT/torch-tta-$m.md" || rc=1
  done
  echo "torch_tta.sh: the runs' lines written into docs/perf.md, the plots into docs/img/"
fi
exit $rc
