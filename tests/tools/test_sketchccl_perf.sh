#!/usr/bin/env bash
# sketchccl-perf smoke test: 2 local ranks (standalone, loopback), tiny sizes; the nccl-tests
# columns are there, the exact ring `none` has error 0 and an fp32 ring's wire ratio, a lossy
# codec shows a small non-zero error, JSON is written, bad flags fail clearly; the same for
# --coll reduce_scatter and --coll allgather. A few seconds.
set -u
perf=$1
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true
export HOME=$tmp SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=30

timeout 60 "$perf" --nranks 2 -b 4K -e 256K -f 4 -n 2 -w 1 --codec none -J "$tmp/none.json" \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "none: exits 0" test "$rc" -eq 0
check "none: nccl-tests column header" grep -qE 'size +count +type +redop +root +time +algbw +busbw +nmse +maxrel +est_nmse +wire/in' "$tmp/out"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum' "$tmp/out")
check "none: one row per size (4K 16K 64K 256K)" test "$rows" -eq 4
check "none: nmse and maxrel are 0 on every row" \
  awk '/^ +[0-9]/ { if ($9 != "0" || $10 != "0") bad = 1 } END { exit bad }' "$tmp/out"
# busbw = algbw for 2 ranks; the time (not the 3-decimal GB/s, 0.000 on a loaded machine) > 0.
check "none: busbw = algbw for 2 ranks, time positive" \
  awk '/^ +[0-9]/ { if ($7 != $8 || $6 <= 0) bad = 1 } END { exit bad }' "$tmp/out"
check "none: no estimate (exact), wire/in ~ 1 (fp32 ring, 2 ranks)" \
  awk '/^ +[0-9]/ { if ($11 != "N/A" || $12 < 0.99 || $12 > 1.1) bad = 1 } END { exit bad }' "$tmp/out"
check "none: JSON written with 4 results" test "$(grep -o '"size"' "$tmp/none.json" | wc -l)" -eq 4
check "none: the codec column and the JSON name the codec that ran" \
  bash -c "awk '/^ +[0-9]/ { if (\$13 != \"none\") bad = 1 } END { exit bad }' '$tmp/out' &&
           test \$(grep -o '\"codec_ran\": \"none\"' '$tmp/none.json' | wc -l) -eq 4"

timeout 60 "$perf" --nranks 2 -b 64K -e 64K -n 1 -w 0 --codec q8 -d bfloat16 -o avg \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "q8 bf16 avg: exits 0" test "$rc" -eq 0
check "q8: small non-zero error, its estimate within 2x, wire about half of the bf16 input" \
  awk '/^ +[0-9]/ { n++; if (!($9 > 0 && $9 < 1e-2 && $11 > $9 / 2 && $11 < $9 * 2 && $12 < 0.6)) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"
# auto names the codec it chose, one of the codecs (not "-" nor "auto"), and its wire/in is the
# timed calls' alone, that codec's on dense data (q8 under half the fp32 ring's 1.0), not raised
# by the warm-up's (auto's first call of a buffer runs `sparse`, exact, 1.5 on dense data).
timeout 60 "$perf" --nranks 2 -b 1M -e 1M -n 2 -w 1 --codec auto >"$tmp/out" 2>"$tmp/err"
check "auto: the codec column names the codec it ran" \
  awk '/^ +[0-9]/ { n++; if ($13 !~ /^(none|bf16|fp16|q8|q4|q2|q[842]r|casq[234]|s2|sparse)$/) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"
check "auto: wire/in counts the timed calls only (the codec's, not the warm-up's sparse)" \
  awk 'BEGIN { cap["q8"] = 0.5; cap["bf16"] = 0.75; cap["none"] = 1.01 }
       /^ +[0-9]/ { n++; if (!($13 in cap) || !($12 > 0 && $12 < cap[$13])) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"

timeout 60 "$perf" --nranks 2 -b 64K -e 64K -n 1 -w 0 --codec sparse --data sparse:0.05 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
check "sparse on sparse data: exact and fewer wire bytes" \
  awk '/^ +[0-9]/ { n++; if ($9 != "0" || $12 >= 0.5) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"

# clustered: embedding-style rows (1% of the rows per rank): sparse is exact and sends little.
timeout 60 "$perf" --nranks 2 -b 256K -e 256K -n 1 -w 0 --codec sparse --data clustered:0.01 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "sparse on clustered data: exits 0, exact, under 0.15 wire bytes per input byte" \
  awk '/^ +[0-9]/ { n++; if ($9 != "0" || $12 >= 0.15) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"
"$perf" --data clustered:0 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad --data clustered:0: non-zero exit naming clustered" \
  bash -c "test $rc -ne 0 && grep -q clustered '$tmp/err'"

# ReduceScatter as reduce_scatter_perf: 3 ranks, the size is the input's (a multiple of 3
# elements), busbw = algbw * 2/3, the exact ring sends (P-1)/P of the input, rank 0's chunk exact.
timeout 60 "$perf" --nranks 3 --coll reduce_scatter -b 12K -e 48K -f 4 -n 2 -w 1 --codec none \
  -J "$tmp/rs.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "reduce_scatter none: exits 0" test "$rc" -eq 0
check "reduce_scatter: named in the header" grep -q 'sketchccl-perf: ReduceScatter' "$tmp/out"
check "reduce_scatter none: 2 rows, counts a multiple of 3, error 0" \
  awk '/^ +[0-9]/ { n++; if ($2 % 3 != 0 || $9 != "0" || $10 != "0") bad = 1 } END { exit bad || n != 2 }' "$tmp/out"
# (busbw from size and time: the printed GB/s has 3 decimals)
check "reduce_scatter none: busbw = size / time * 2/3, wire/in ~ 2/3" \
  awk '/^ +[0-9]/ { b = $1 / ($6 * 1e3) * 2 / 3; d = $8 - b; if (d < -0.0015 || d > 0.0015) bad = 1
                  if ($12 < 0.66 || $12 > 0.75) bad = 1 } END { exit bad }' "$tmp/out"
check "reduce_scatter: JSON says the collective" grep -q '"collective": "reduce_scatter"' "$tmp/rs.json"
timeout 60 "$perf" --nranks 3 --coll reduce_scatter -b 96K -e 96K -n 1 -w 0 --codec q8 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
check "reduce_scatter q8: small non-zero error, its estimate within 2x, fewer wire bytes" \
  awk '/^ +[0-9]/ { n++; if (!($9 > 0 && $9 < 1e-2 && $11 > $9 / 2 && $11 < $9 * 2 && $12 < 0.3)) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"
"$perf" --coll broadcast >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad --coll: non-zero exit" test "$rc" -ne 0

# AllGather as all_gather_perf: 3 ranks, the size is the output's (a multiple of 3 elements),
# no op; unset codec: exact (no compressed bytes counted); q8 (SKETCHCCL_ALLGATHER_CODEC): a
# small error and about a quarter of the exact ring's P-1 = 2 wire bytes per input byte.
timeout 60 "$perf" --nranks 3 --coll allgather -b 12K -e 48K -f 4 -n 2 -w 1 -J "$tmp/ag.json" \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "allgather exact: exits 0, named in the header" \
  bash -c "test $rc -eq 0 && grep -q 'sketchccl-perf: AllGather' '$tmp/out'"
check "allgather exact: 2 rows, counts a multiple of 3, op none, error 0" \
  awk '/^ +[0-9]/ { n++; if ($2 % 3 != 0 || $4 != "none" || $9 != "0" || $10 != "0") bad = 1 } END { exit bad || n != 2 }' "$tmp/out"
check "allgather: JSON says the collective" grep -q '"collective": "allgather"' "$tmp/ag.json"
timeout 60 "$perf" --nranks 3 --coll allgather -b 96K -e 96K -n 1 -w 0 --codec q8 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
cat "$tmp/out"
check "allgather q8: small non-zero error, about 1/4 of the exact ring's wire bytes, codec q8" \
  awk '/^ +[0-9]/ { n++; if (!($9 > 0 && $9 < 1e-3 && $12 > 0.4 && $12 < 0.6 && $13 == "q8")) bad = 1 } END { exit bad || n != 1 }' "$tmp/out"

"$perf" --codec nope >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad --codec: non-zero exit" test "$rc" -ne 0
check "bad --codec: message lists the codecs" grep -qF "none bf16 fp16 q8" "$tmp/err"
"$perf" -b 1X >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad -b: non-zero exit with message" test "$rc" -ne 0 -a -s "$tmp/err"
"$perf" --data sparse:2 >"$tmp/out" 2>"$tmp/err"; rc=$?
check "bad --data: non-zero exit" test "$rc" -ne 0
"$perf" --bogus >"$tmp/out" 2>"$tmp/err"; rc=$?
check "unknown option: non-zero exit" test "$rc" -ne 0

echo "$fails failure(s)"
test "$fails" -eq 0
