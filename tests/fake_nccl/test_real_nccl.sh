#!/usr/bin/env bash
# The real libnccl.so.2 under the shim, without a GPU: what the caller sees must be what it sees
# without the shim, except that the unique id gains SketchCCL's record in bytes 40-127.
set -u
client=$1
shim=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if "${@:2}"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi; }

env -u LD_PRELOAD "$client" >"$tmp/plain" 2>"$tmp/plain.err"
LD_PRELOAD=$shim SKETCHCCL_DEBUG=INFO "$client" >"$tmp/shim" 2>"$tmp/shim.err"
echo "--- without the shim"; cat "$tmp/plain"
echo "--- with the shim"; cat "$tmp/shim"

for key in version errstr uniqueid init lasterror; do
  check "$key is the same with and without the shim" \
    diff <(grep "^$key " "$tmp/plain") <(grep "^$key " "$tmp/shim")
done
check "the real ncclGetVersion answers 22809" grep -q "^version 0 22809$" "$tmp/shim"
check "without the shim NCCL leaves bytes 40-127 zero" grep -q "^tail_nonzero 0$" "$tmp/plain"
check "with the shim bytes 40-127 hold the record" grep -qv "^tail_nonzero 0$" <(grep "^tail_nonzero" "$tmp/shim")
check "init fails with the real code (unhandled cuda error)" grep -q "^init 1 " "$tmp/shim"
check "the real error text reaches the caller" grep -qi "cuda" <(grep "^lasterror" "$tmp/shim")
check "the shim says it forwards to the real NCCL" grep -q "forwarding to .*libnccl.so.2" "$tmp/shim.err"
echo "$fails failure(s)"
exit $((fails > 0))
