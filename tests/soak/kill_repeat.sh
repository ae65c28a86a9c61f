#!/usr/bin/env bash
# The kill tests over and over under CPU load: counts runs, passes, and survivors that aborted
# (a signal, e.g. UCX's "Assertion ... failed" SIGABRT) instead of failing the call.
#
#   tests/soak/kill_repeat.sh [BUILD_DIR] [RUNS (300)] [TESTS (kill_ucx_tcp_n4)] [LOAD (2)]
#
# LOAD busy loops run beside the tests, all at nice 19 (so that the tests and the load share
# the cores evenly without taking them from anyone else). Prints one line of totals; the output
# of every failing run is kept in a folder it names. Exit status 0 when every run passed.
set -uo pipefail
BUILD=${1:-build}
RUNS=${2:-300}
TESTS=${3:-kill_ucx_tcp_n4}
LOAD=${4:-2}
LOGDIR=$(mktemp -d /tmp/sccl-kill-rel.XXXXXX)
hogs=()
for ((i = 0; i < LOAD; i++)); do
  nice -n 19 sh -c 'while :; do :; done' &
  hogs+=($!)
done
trap 'for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done' EXIT
runs=0 passed=0 aborts=0 other=0
for ((n = 1; n <= RUNS; n++)); do
  for t in $TESTS; do
    runs=$((runs + 1))
    # Meson's exit status says whether the test passed (its console line can be cut).
    nice -n 19 meson test -C "$BUILD" --no-rebuild "$t" >/dev/null 2>&1
    rc=$?
    log="$BUILD/meson-logs/testlog.txt"
    if [ "$rc" -eq 0 ]; then
      passed=$((passed + 1))
      continue
    fi
    cp "$log" "$LOGDIR/run$n-$t.log"
    if grep -q "signal 6\|Assertion\|signal 11" "$log"; then aborts=$((aborts + 1)); else other=$((other + 1)); fi
    echo "run $n $t: failed ($(grep -m1 'Assertion\|FAIL:' "$log" | cut -c1-160))" >&2
  done
done
echo "kill_repeat: $runs runs of $TESTS under $LOAD busy loops: $passed passed," \
  "$aborts with a survivor aborted (signal), $other failed otherwise; logs of failures: $LOGDIR"
[ "$passed" -eq "$runs" ]
