#!/usr/bin/env bash
# sketchccl-run sets the variables and LD_PRELOAD, refuses bad values, and runs the command.
set -u
run=$1
fails=0
check() { if "${@:2}"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true

"$run" --codec q4 --min-bytes 2M -v -- env >"$tmp/env" 2>&1; rc=$?
check "runs the command" test "$rc" -eq 0
check "sets SKETCHCCL_CODEC" grep -qx "SKETCHCCL_CODEC=q4" "$tmp/env"
check "sets SKETCHCCL_MIN_BYTES" grep -qx "SKETCHCCL_MIN_BYTES=2M" "$tmp/env"
check "-v sets SKETCHCCL_DEBUG=INFO" grep -qx "SKETCHCCL_DEBUG=INFO" "$tmp/env"
check "preloads libsketchccl.so" grep -q "^LD_PRELOAD=.*libsketchccl.so" "$tmp/env"

LD_PRELOAD=/lib/x86_64-linux-gnu/libc.so.6 "$run" -- env >"$tmp/env2" 2>&1
check "keeps an existing LD_PRELOAD after it" grep -q "^LD_PRELOAD=.*libsketchccl.so:/lib/x86_64-linux-gnu/libc.so.6$" "$tmp/env2"

"$run" --codec bogus -- true >"$tmp/bad" 2>&1; rc=$?
check "a bad codec exits 1" test "$rc" -eq 1
check "and names the variable" grep -q "SKETCHCCL_CODEC='bogus'" "$tmp/bad"
"$run" --frob -- true >/dev/null 2>&1; rc=$?
check "an unknown option exits 2" test "$rc" -eq 2
"$run" --help >/dev/null 2>&1; rc=$?
check "--help exits 0" test "$rc" -eq 0
"$run" -- sh -c 'exit 7'; rc=$?
check "the command's exit status is kept" test "$rc" -eq 7
echo "$fails failure(s)"
exit $((fails > 0))
