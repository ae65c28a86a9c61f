#!/usr/bin/env bash
# ddp-train smoke test: 2 local ranks (standalone, loopback), the text task for a few steps per
# configuration. Every configuration trains the same model (the hash of the initial parameters
# and first batch agrees), the per-step times are there and positive, the DDP bucket is the whole
# embedding-bag gradient, every configuration gets one time-to-accuracy line in the demo's form,
# the exact run reaches its own target, the CSV has a row per evaluation; an AllReduce issued inside
# a group progresses before ncclGroupEnd (what the overlap rests on); bad input fails clearly.
set -u
ddp=$1
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true
export HOME=$tmp SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=30

timeout 120 "$ddp" --task text --configs fp32,bf16,q8+ef,sparse --nranks 2 --epochs 1 --steps 6 \
  --eval-every 2 --csv "$tmp/tta.csv" >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "exits 0" test "$rc" -eq 0
check "one run line per configuration" test "$(grep -cE '^  [a-z0-9+]+ +seed 1: final' "$tmp/out")" -eq 4
check "every configuration trained the same model" \
  test "$(grep -oE 'model [0-9a-f]{16}' "$tmp/out" | sort -u | wc -l)" -eq 1
check "per-step compute and exposed communication are positive, 6 steps" \
  awk '/seed 1: final/ { n++; if ($0 !~ / 6 steps;/) bad = 1; for (k = 1; k < NF; k++) { if ($k == "compute" && $(k + 1) <= 0) bad = 1; if ($k == "comm" && $(k + 1) <= 0) bad = 1 } } END { exit bad || n != 4 }' "$tmp/out"
check "one bucket: the whole gradient (524424 parameters)" grep -q 'buckets 0:524424$' "$tmp/out"
form='^  time-to-accuracy text [a-z0-9+]+: ([0-9.]+ s to [0-9.]+% \(([0-9.]+x|n/a) exact fp32, ([0-9.]+x|n/a) bf16\)|never reached [0-9.]+% \(final [0-9.]+%\))$'
check "four time-to-accuracy lines in the demo's form" test "$(grep -cE "$form" "$tmp/out")" -eq 4
check "exact fp32 reaches its own target at 1.00x" grep -qE '^  time-to-accuracy text fp32: [0-9.]+ s to [0-9.]+% \(1\.00x exact fp32' "$tmp/out"
check "CSV: a header and 4 evaluations per configuration (steps 0, 2, 4, 6)" \
  test "$(wc -l <"$tmp/tta.csv")" -eq 17

timeout 60 "$ddp" --overlap-check --task text --nranks 2 >"$tmp/overlap" 2>&1; rc=$?
cat "$tmp/overlap"
check "overlap: a group's AllReduce progresses before ncclGroupEnd" \
  test "$rc" -eq 0 -a "$(grep -c 'progresses before ncclGroupEnd' "$tmp/overlap")" -eq 1

timeout 30 "$ddp" --task text --configs q8,bf16 --nranks 2 >"$tmp/bad" 2>&1; rc=$?
check "without fp32: refused, with the reason" test "$rc" -ne 0 -a "$(grep -c 'fp32 is needed' "$tmp/bad")" -eq 1
timeout 30 "$ddp" --task nope >"$tmp/bad" 2>&1; rc=$?
check "unknown task: refused" test "$rc" -ne 0 -a "$(grep -c -- '--task' "$tmp/bad")" -ge 1
timeout 30 "$ddp" --task digits-wide --configs fp32 >"$tmp/bad" 2>&1; rc=$?
check "digits task without --digits: refused" test "$rc" -ne 0 -a "$(grep -c -- '--digits FILE' "$tmp/bad")" -eq 1
timeout 30 "$ddp" --task text --bucket-mb 0 >"$tmp/bad" 2>&1; rc=$?
check "bucket size 0: refused" test "$rc" -ne 0
[ $fails -eq 0 ] || { echo "$fails check(s) failed"; cat "$tmp/err"; exit 1; }
