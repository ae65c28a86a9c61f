#!/usr/bin/env bash
# The fault campaign: for a given time, runs of 4 standalone ranks doing large AllReduces and
# ReduceScatters (tests/fault/fault.sh) with one random fault each: a link down for 1-5 s (within
# or beyond SKETCHCCL_TIMEOUT), a rank partitioned for good, a rank stopped for 1-5 s, a rank
# killed, a bad argument on one rank, ncclCommAbort during a stalled call; every transport and
# schedule. Prints one line of totals and exits non-zero unless every run behaved as expected
# (wrong results, hangs and crashes all 0).
#
#   tests/soak/fault_campaign.sh [BUILD_DIR] [--seconds S (60)] [--seed N (random)]
#                                [--transports socket,ucx]
#
# Without root, the network faults (linkdown, partition) are left out. The Meson test
# `fault_campaign` (suite soak) is the short form; the long form is --seconds 1800.
set -uo pipefail
BUILD=build
SECONDS_WANTED=60
SEED=$(( (RANDOM << 15) | RANDOM ))
TRANSPORTS=socket,ucx
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { BUILD=$1; shift; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_WANTED=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --transports) TRANSPORTS=$2; shift 2 ;;
    *) echo "fault_campaign.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
FAULT="$(dirname "$(readlink -f "$0")")/../fault/fault.sh"
RANDOM=$SEED
LOGDIR=$(mktemp -d /tmp/sccl-campaign-rel.XXXXXX)
scenarios=(stop stop kill kill badinput abort)
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
  scenarios+=(linkdown linkdown linkdown partition)
fi
IFS=, read -r -a transports <<<"$TRANSPORTS"
algos=(ring twoshot hier)
ops=(allreduce reducescatter)
bads=(null type op)
pick() { local -n a=$1; echo "${a[RANDOM % ${#a[@]}]}"; }

runs=0 faults=0 missed=0 ok_calls=0 err_calls=0 wrong=0 hangs=0 crashes=0 unexpected=0
end=$((SECONDS + SECONDS_WANTED))
while [ "$SECONDS" -lt "$end" ]; do
  sc=$(pick scenarios)
  args=(transport="$(pick transports)" algo="$(pick algos)" op="$(pick ops)" rank=$((RANDOM % 4))
        count=$(( (1 + RANDOM % 4) * 1048576 )) calls=40)
  down=$((1 + RANDOM % 5))
  case "$sc" in
    linkdown | stop)
      # Half the outages end well within the timeout (the calls must complete), half outlast it.
      # A link's "within" reaches past TCP's next doubled retransmission (fault.sh's expectation).
      if [ $((RANDOM % 2)) -eq 0 ]; then
        timeout=$((down + 8))
        [ "$sc" = linkdown ] && timeout=$((2 * down + 8))
      else
        timeout=$((down > 3 ? down - 1 : 2))
        down=$((timeout + 2))
      fi
      args+=(down="$down" timeout="$timeout") ;;
    partition | kill) args+=(timeout=$((2 + RANDOM % 4))) ;;
    badinput) args+=(bad="$(pick bads)" timeout=$((2 + RANDOM % 3))) ;;
    abort) args+=(down=1 timeout=60) ;;
  esac
  runs=$((runs + 1))
  faults=$((faults + 1))
  line=$("$FAULT" "$BUILD" "$sc" "${args[@]}" 2>&1)
  rc=$?
  [ "$rc" -eq 77 ] && { runs=$((runs - 1)); faults=$((faults - 1)); continue; }
  first=$(echo "$line" | grep -m1 '^PASS\|^FAIL')
  read -r o e w < <(echo "$first" | sed -n 's/.*\[calls ok=\([0-9]*\) err=\([0-9]*\) wrong=\([0-9]*\)\].*/\1 \2 \3/p')
  ok_calls=$((ok_calls + ${o:-0}))
  err_calls=$((err_calls + ${e:-0}))
  wrong=$((wrong + ${w:-0}))
  case "$first" in *"(hang)"*) hangs=$((hangs + 1)) ;; esac
  case "$first" in *"without DONE"*) crashes=$((crashes + 1)) ;; esac
  case "$first" in *"different bytes"*) wrong=$((wrong + 1)) ;; esac
  case "$first" in
    *"missed every call"*) missed=$((missed + 1)); faults=$((faults - 1)); continue ;;
  esac
  if [ "$rc" -ne 0 ]; then
    unexpected=$((unexpected + 1))
    echo "$line" >"$LOGDIR/run$runs.log"
    echo "run $runs (seed $SEED): $first" >&2
  fi
done
echo "fault campaign: ${SECONDS_WANTED}s seed $SEED: runs $runs, faults injected $faults, faults that missed every call $missed," \
  "calls completed correctly $ok_calls, calls failed cleanly $err_calls, wrong results $wrong," \
  "hangs $hangs, crashes $crashes, runs not as expected $unexpected"
[ "$unexpected" -eq 0 ] || echo "fault_campaign.sh: the failing runs' output is in $LOGDIR" >&2
[ "$unexpected" -eq 0 ] && rm -rf "$LOGDIR"
[ "$runs" -gt 0 ] && [ "$unexpected" -eq 0 ] && [ "$wrong" -eq 0 ] && [ "$hangs" -eq 0 ] &&
  [ "$crashes" -eq 0 ]
