#!/usr/bin/env bash
# sketchccl-perf out of memory: an error (exit 3, "out of memory allocating ..."), never an abort,
# and its id file removed -- also when it is stopped by SIGTERM.
#   perf_oom.sh SKETCHCCL_PERF
set -u
PERF=$1
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
export SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=30
fail() { echo "FAIL: $*"; exit 1; }

# 1 GiB of inputs in a 600 MB address space.
out=$( (ulimit -v 600000; "$PERF" --standalone --nranks 1 --rank 0 --id-file "$DIR/a.id" \
        -b 1G -e 1G -n 1 -w 0) 2>&1)
rc=$?
echo "$out" | tail -3
[ $rc -eq 3 ] || fail "exit status $rc, expected 3 (134 is an abort)"
echo "$out" | grep -q "out of memory allocating" || fail "no 'out of memory allocating' message"
[ ! -e "$DIR/a.id" ] || fail "the id file was left behind after the error"

# Rank 0 of 2 waiting for a rank that never comes, stopped by SIGTERM.
"$PERF" --standalone --nranks 2 --rank 0 --id-file "$DIR/b.id" -b 1M -e 1M >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do [ -e "$DIR/b.id" ] && break; sleep 0.1; done
[ -e "$DIR/b.id" ] || fail "rank 0 wrote no id file"
kill -TERM $pid
wait $pid
[ ! -e "$DIR/b.id" ] || fail "the id file was left behind after SIGTERM"
echo "PASS"
