#!/usr/bin/env bash
# sketchccl-info as a user runs it: report, bad values, file origins, README table in sync.
set -u
info=$1
src=$2
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true
export HOME=$tmp  # no ~/.sketchccl.conf of the caller's

"$info" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "plain run exits 0" test "$rc" -eq 0
for section in "SketchCCL " "Configuration:" "CUDA:" "Real NCCL:" "Transports:" "Topology:" "Library:" \
  "needs glibc" "SKETCHCCL_CODEC" "(default)" "socket"; do
  check "report has '$section'" grep -qF -- "$section" "$tmp/out"
done

SKETCHCCL_CODEC=bogus "$info" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "SKETCHCCL_CODEC=bogus exits 1" test "$rc" -eq 1
check "bogus codec message names the variable and value" \
  grep -qF "SKETCHCCL_CODEC='bogus' is not valid" "$tmp/err"
check "bogus codec message lists accepted values" grep -qF "accepted is auto|none|" "$tmp/err"

printf '# site settings\nSKETCHCCL_CODEC = q4\n\nSKETCHCCL_SEED=42\n' >"$tmp/site.conf"
SKETCHCCL_CONF_FILE=$tmp/site.conf SKETCHCCL_SEED=3 "$info" >"$tmp/out" 2>&1; rc=$?
check "conf file run exits 0" test "$rc" -eq 0
check "codec from the file with its line" grep -qE "SKETCHCCL_CODEC += q4 +\($tmp/site.conf:2\)" "$tmp/out"
check "environment beats the file" grep -qE "SKETCHCCL_SEED += 3 +\(environment\)" "$tmp/out"

SKETCHCCL_CONF_FILE=$tmp/missing.conf "$info" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "missing SKETCHCCL_CONF_FILE exits 1" test "$rc" -eq 1

SKETCHCCL_TYPO=1 "$info" >"$tmp/out" 2>&1; rc=$?
check "unknown variable is only a warning" test "$rc" -eq 0
check "unknown variable is listed" grep -qF "unknown variable SKETCHCCL_TYPO" "$tmp/out"

"$info" --help >"$tmp/out" 2>&1; rc=$?
check "--help exits 0 and lists variables" test "$rc" -eq 0 -a -n "$(grep SKETCHCCL_TIMEOUT "$tmp/out")"
"$info" --frobnicate >/dev/null 2>&1; rc=$?
check "unknown flag exits 2" test "$rc" -eq 2

# auto's view of this machine: measured codec speeds and the verdicts on a stated link.
SKETCHCCL_LINK_GBPS=1 "$info" --probe --nranks 4 >"$tmp/out" 2>&1; rc=$?
check "--probe exits 0" test "$rc" -eq 0
check "--probe measures the candidates" grep -qE "SKETCHCCL_LINK_GBPS: link 1 Gbit/s, .*\(stated\), q8 encode [0-9.]+ step" "$tmp/out"
check "--probe: 1 Gbit/s compresses 64 MiB in every column" grep -qE "^ +64 MiB +q8 .* q8 .* q8 " "$tmp/out"
SKETCHCCL_LINK_GBPS=100000 "$info" --probe >"$tmp/out" 2>&1
check "--probe: NCCL alone beats the host's codecs on a 100 Tbit/s link" grep -qE "^ +64 MiB +.* NCCL .* NCCL " "$tmp/out"
"$info" --probe --nranks 1 >/dev/null 2>&1; rc=$?
check "--probe --nranks 1 exits 2" test "$rc" -eq 2

# The README's reference table is produced by --config-table; they must not drift.
"$info" --config-table >"$tmp/table"
sed -n '/<!-- config-table:begin -->/,/<!-- config-table:end -->/p' "$src/README.md" |
  sed '1d;$d' >"$tmp/readme_table"
check "README configuration table matches sketchccl-info --config-table (./run docs fixes it)" \
  diff -u "$tmp/table" "$tmp/readme_table"

echo "$fails failure(s)"
exit $((fails > 0))
