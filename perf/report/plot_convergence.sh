#!/usr/bin/env bash
# Plots test accuracy per epoch per configuration from `convergence --csv FILE` (gnuplot PNG).
#   perf/report/plot_convergence.sh convergence.csv out.png
set -euo pipefail
csv=${1:?usage: plot_convergence.sh CSV PNG}
png=${2:?usage: plot_convergence.sh CSV PNG}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tasks=$(awk -F, 'NR > 1 { print $1 }' "$csv" | awk '!seen[$0]++')
ntasks=$(echo "$tasks" | wc -l)
{
  echo "set terminal pngcairo size $((520 * ntasks)),420 font 'sans,9'"
  echo "set output '$png'"
  echo "set multiplot layout 1,$ntasks"
  for t in $tasks; do
    configs=$(awk -F, -v t="$t" 'NR > 1 && $1 == t { print $2 }' "$csv" | awk '!seen[$0]++')
    plots=()
    for c in $configs; do
      awk -F, -v t="$t" -v c="$c" 'NR > 1 && $1 == t && $2 == c { print $3, 100 * $7 }' "$csv" \
        >"$tmp/$t-$c.dat"
      dash=""
      case "$c" in *+ef) dash=" dt 2" ;; esac
      plots+=("'$tmp/$t-$c.dat' with linespoints lw 1.5$dash title '$c'")
    done
    echo "set title 'convergence: $t (4 ranks, test accuracy)'"
    echo "set xlabel 'epoch'; set ylabel 'test accuracy (%)'; set grid; set key bottom right"
    echo "set yrange [0:100]"
    (IFS=,; echo "plot ${plots[*]}")
  done
  echo "unset multiplot"
} | gnuplot
echo "$png"
