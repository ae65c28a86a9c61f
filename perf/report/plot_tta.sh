#!/usr/bin/env bash
# Plots test accuracy against training wall-clock time per configuration from one or more
# `ddp-train --csv FILE` files (gnuplot PNG, one panel per task, the first seed of each); with
# --loss, the validation loss of `torch_tta.py --csv FILE` files (rows task,config,seed,time,loss).
#   perf/report/plot_tta.sh [--loss] out.png tta-digits-wide.csv [tta-text.csv ...]
set -euo pipefail
LOSS=0
if [ "${1:-}" = --loss ]; then LOSS=1; shift; fi
png=${1:?usage: plot_tta.sh [--loss] PNG CSV...}
shift
[ $# -gt 0 ] || { echo "usage: plot_tta.sh [--loss] PNG CSV..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -F, 'FNR > 1' "$@" >"$tmp/all.csv"
[ -s "$tmp/all.csv" ] || { echo "plot_tta.sh: no rows in $*" >&2; exit 1; }
tasks=$(awk -F, '{ print $1 }' "$tmp/all.csv" | awk '!seen[$0]++')
ntasks=$(echo "$tasks" | wc -l)
{
  echo "set terminal pngcairo size $((560 * ntasks)),440 font 'sans,9'"
  echo "set output '$png'"
  echo "set multiplot layout 1,$ntasks"
  for t in $tasks; do
    seed=$(awk -F, -v t="$t" '$1 == t { print $3; exit }' "$tmp/all.csv")
    configs=$(awk -F, -v t="$t" '$1 == t { print $2 }' "$tmp/all.csv" | awk '!seen[$0]++')
    lo=$(awk -F, -v t="$t" '$1 == t && $4 > 0 { v = 100 * $5; if (m == "" || v < m) m = v } END { print int(m / 10) * 10 }' "$tmp/all.csv")
    plots=()
    for c in $configs; do
      f="$tmp/$t-${c//+/_}.dat"
      awk -F, -v t="$t" -v c="$c" -v s="$seed" -v k=$((LOSS ? 1 : 100)) \
        '$1 == t && $2 == c && $3 == s { print $4, k * $5 }' "$tmp/all.csv" >"$f"
      dash=""
      case "$c" in *+ef) dash=" dt 2" ;; esac
      plots+=("'$f' with linespoints lw 1.5 pt 7 ps 0.5$dash title '$c'")
    done
    echo "set title 'time to accuracy: $t (4 ranks, seed $seed)'"
    echo "set xlabel 'training wall-clock time (s)'; set grid; set xrange [0:*]"
    if [ "$LOSS" = 1 ]; then  # the loss falls fast first: the range from the first evaluation on
      hi=$(awk -F, -v t="$t" -v s="$seed" '$1 == t && $3 == s && $4 > 0 && !h[$2]++ { if ($5 > m) m = $5 } END { print m }' "$tmp/all.csv")
      echo "set ylabel 'validation loss'; set key top right; set yrange [*:$hi]"
    else
      echo "set ylabel 'test accuracy (%)'; set key bottom right; set yrange [$lo:100]"
    fi
    (IFS=,; echo "plot ${plots[*]}")
  done
  echo "unset multiplot"
} | gnuplot
echo "$png"
