#!/usr/bin/env bash
# A fault in the middle of large collectives: 4 standalone ranks (fault_worker) run CALLS large
# AllReduces or ReduceScatters while this script drops a link, stops a rank, or aborts.
#
#   tests/fault/fault.sh BUILD_DIR SCENARIO [key=value ...]
#
# Scenarios (each prints one line "PASS|FAIL <scenario> <settings>: <what was seen>"):
#   linkdown   each rank in its own network namespace behind a bridge; the bridge port of rank
#              `rank` goes down (ip link set down) for `down` seconds, then up again: in the
#              middle of a call when calls last long enough to be hit, else just before one
#              starts (the settings say at=mid or at=start; see inject).
#              Expected: resumed + 4 s < timeout, every call completes correctly on every rank
#              (resumed: down for the socket transport, 2 x down + 1 for UCX over TCP, whose
#              retransmission back-off SketchCCL cannot cap); down > timeout, every rank fails
#              with an error naming a peer. Needs root (else 77).
#   partition  as linkdown, but the link never comes back: every rank fails with an error.
#   stop       rank `rank` is stopped (SIGSTOP) for `down` seconds mid-call, then continued
#              (SIGCONT); same expectations as linkdown. Loopback, no root needed.
#   kill       rank `rank` is killed (SIGKILL) mid-call: every survivor fails with an error naming
#              a peer, and none aborts or hangs (loopback).
#   badinput   rank `rank` passes a bad argument (`bad`=null|type|op) in its second call: it gets
#              ncclInvalidArgument, every other rank an error within the timeout (loopback).
#   abort      rank `rank` is stopped for good; the others call ncclCommAbort from a second thread
#              `down` seconds into their second call: the stalled call must return within 3 s,
#              and what the communicator held must be freed (RSS back within 64 MB).
# Settings: transport=socket|ucx  algo=ring|twoshot|hier  op=allreduce|reducescatter
#   nranks=4  count=4194304 (fp32 per rank)  calls=10  down=2  timeout=15  rank=1  bad=null
# Exit status: 0 pass, 1 fail, 77 skipped (no root / no namespaces for linkdown, partition).
set -uo pipefail
BUILD=${1:?usage: fault.sh BUILD_DIR SCENARIO [key=value ...]}
SCENARIO=${2:?usage: fault.sh BUILD_DIR SCENARIO [key=value ...]}
shift 2
transport=socket algo=ring op=allreduce nranks=4 count=4194304 calls=10 down=2 timeout=15 rank=1 bad=null
for kv in "$@"; do
  case "$kv" in
    transport=* | algo=* | op=* | nranks=* | count=* | calls=* | down=* | timeout=* | rank=* | bad=*)
      declare "$kv" ;;
    *) echo "fault.sh: unknown setting $kv" >&2; exit 2 ;;
  esac
done
WORKER="$BUILD/tests/fault/fault_worker"
[ -x "$WORKER" ] || { echo "fault.sh: $WORKER not built" >&2; exit 2; }
WORKER=$(readlink -f "$WORKER")
SETTINGS="transport=$transport algo=$algo op=$op down=${down}s timeout=${timeout}s rank=$rank"
DIR=$(mktemp -d /tmp/sccl-fault-rel.XXXXXX)
NS=""  # namespace prefix when the ranks live in namespaces
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "$NS" ]; then
    for ((i = 0; i < nranks; i++)); do ip netns del "${NS}r$i" 2>/dev/null; done
    ip netns del "${NS}b" 2>/dev/null
  fi
  [ -n "${KEEP_FAULT_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT

# Four namespaces on a bridge (a fifth namespace), names with this script's pid.
make_network() {
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
    echo "SKIP $SCENARIO: needs root and iproute2 (network namespaces)"; exit 77
  fi
  NS="screl$$"
  ip netns add "${NS}b" 2>/dev/null || { echo "SKIP $SCENARIO: cannot create a namespace"; NS=""; exit 77; }
  ip -n "${NS}b" link set lo up
  ip -n "${NS}b" link add br0 type bridge
  ip -n "${NS}b" link set br0 up
  for ((i = 0; i < nranks; i++)); do
    ip netns add "${NS}r$i"
    ip -n "${NS}r$i" link set lo up
    ip -n "${NS}r$i" link add eth0 type veth peer name rel$i netns "${NS}b"
    ip -n "${NS}r$i" addr add "10.91.0.$((i + 1))/24" dev eth0
    ip -n "${NS}r$i" link set eth0 up
    ip -n "${NS}b" link set "rel$i" master br0
    ip -n "${NS}b" link set "rel$i" up
  done
}

start_ranks() {
  local abort_after=${1:-0}
  export SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=$timeout SKETCHCCL_MIN_BYTES=0
  export SKETCHCCL_TRANSPORT=$transport UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=tcp
  # Gated: after call 1 every rank waits for $DIR/go, so that inject can meet a call.
  if [ -n "${GATED:-}" ]; then export FAULT_GO_FILE=$DIR/go; else unset FAULT_GO_FILE; fi
  case "$algo" in
    ring) export SKETCHCCL_ALGO=ring SKETCHCCL_HIERARCHY=flat SKETCHCCL_CODEC=none ;;
    twoshot) export SKETCHCCL_ALGO=twoshot SKETCHCCL_HIERARCHY=flat SKETCHCCL_CODEC=q8 ;;
    hier) export SKETCHCCL_ALGO=auto SKETCHCCL_HIERARCHY=auto SKETCHCCL_CODEC=none ;;
    *) echo "fault.sh: algo=$algo?" >&2; exit 2 ;;
  esac
  for ((i = 0; i < nranks; i++)); do
    # hier: two ranks per node, two nodes
    local host="node$((i / 2))"
    [ "$algo" = hier ] || host="node$i"
    if [ -n "$NS" ]; then
      SKETCHCCL_HOSTID=$host SKETCHCCL_SOCKET_IFNAME=eth0 UCX_NET_DEVICES=eth0 \
        ip netns exec "${NS}r$i" "$WORKER" "$i" "$nranks" "$DIR/id" "$op" "$count" "$calls" \
        "$abort_after" >"$DIR/rank$i.log" 2>&1 &
    else
      SKETCHCCL_HOSTID=$host SKETCHCCL_SOCKET_IFNAME=lo \
        "$WORKER" "$i" "$nranks" "$DIR/id" "$op" "$count" "$calls" "$abort_after" \
        >"$DIR/rank$i.log" 2>&1 &
    fi
    PIDS+=($!)
    disown $!  # no "Killed" notices from bash: this script reaps nothing itself
  done
}

# Waits (up to 60 s) until every rank has finished its first call (its second with $DIR/go as
# the gate: start_ranks gated): calls are then flowing.
wait_flowing() {
  local first="CALL 0 "
  [ -n "${GATED:-}" ] && first="CALL 1 "
  for _ in $(seq 600); do
    local n=0
    for ((i = 0; i < nranks; i++)); do grep -q "^$first" "$DIR/rank$i.log" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -eq "$nranks" ] && return 0
    sleep 0.1
  done
  return 1
}

# Waits for every rank to exit; prints how many were still running when it gave up. A hang is
# silence, not slowness: it gives up once no rank has printed a line for $1 seconds (a loaded
# machine makes calls slow, not stuck), or after 10 times $1 in all.
wait_ranks() {
  local start=$SECONDS last=$SECONDS lines=-1 now left
  while :; do
    left=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
    [ "$left" -eq 0 ] && break
    now=$(cat "$DIR"/rank*.log 2>/dev/null | wc -l)
    [ "$now" -ne "$lines" ] && { lines=$now; last=$SECONDS; }
    [ $((SECONDS - last)) -ge "$1" ] || [ $((SECONDS - start)) -ge $((10 * $1)) ] && break
    sleep 0.2
  done
  echo "$left"
}

# Puts the fault in place (the command given) where it meets a call, the gated ranks waiting
# before call 2: in the middle of a call when the calls left last long enough for a random point
# in them to be hit (at=mid), else before call 2 starts, which then runs into it (at=start).
inject() {
  local d
  d=$(grep -h '^CALL 1 OK' "$DIR"/rank*.log | awk '{ if ($7 > m) m = $7 } END { print m + 0 }')
  if awk -v d="$d" -v c="$calls" 'BEGIN { exit !((c - 2) * d > 1.5) }'; then
    SETTINGS="$SETTINGS at=mid"
    touch "$DIR/go"
    sleep 0.$((RANDOM % 4))
    "$@"
  else
    SETTINGS="$SETTINGS at=start"
    "$@"
    sleep 0.$((RANDOM % 3))
    touch "$DIR/go"
  fi
}

# Judges the ranks' logs: "ok" (every call correct everywhere, same bytes on every rank),
# "failed" (every rank reported an error naming a rank, none a wrong result), else what is wrong.
# A rank in $SKIP_RANK (killed) is not judged; a rank in $BAD_RANK must fail with
# ncclInvalidArgument (4) instead of naming a peer.
judge() {
  local want_calls=$1 oks=0 errs=0 wrong=0 unnamed=0 crashed=0 judged=0 hashes
  for ((i = 0; i < nranks; i++)); do
    local log="$DIR/rank$i.log"
    [ "$i" = "${SKIP_RANK:-}" ] && continue
    judged=$((judged + 1))
    if [ "$i" = "${BAD_RANK:-}" ]; then
      grep -q '^DONE' "$log" || crashed=$((crashed + 1))
      if grep -q '^CALL [0-9]* ERR 4 ' "$log"; then errs=$((errs + 1)); else unnamed=$((unnamed + 1)); fi
      continue
    fi
    grep -q '^DONE' "$log" || crashed=$((crashed + 1))
    grep -q '^CALL [0-9]* WRONG' "$log" && wrong=$((wrong + 1))
    if grep -q '^CALL [0-9]* ERR\|^INIT ERR' "$log"; then
      errs=$((errs + 1))
      grep '^CALL [0-9]* ERR\|^INIT ERR' "$log" | grep -q 'rank [0-9]' || unnamed=$((unnamed + 1))
    elif [ "$(grep -c '^CALL [0-9]* OK' "$log")" -eq "$want_calls" ]; then
      oks=$((oks + 1))
    fi
  done
  LAST_CALL_OK=""
  if ! grep -h '^CALL [0-9]* ERR' "$DIR"/rank*.log | awk -v c="$((want_calls - 1))" '$2 != c { bad = 1 } END { exit !bad }'; then
    LAST_CALL_OK=1
  fi
  hashes=$(grep -h '^CALL [0-9]* OK' "$DIR"/rank*.log | awk '{print $2, $5}' | sort -u |
    awk '{print $1}' | uniq -d | wc -l)
  # ReduceScatter: each rank holds a different block, so hashes differ by design.
  [ "$op" = reducescatter ] && hashes=0
  if [ "$wrong" -gt 0 ]; then echo "wrong results on $wrong rank(s)"
  elif [ "$crashed" -gt 0 ]; then echo "$crashed rank(s) ended without DONE (crash or kill)"
  elif [ "$hashes" -gt 0 ]; then echo "ranks returned different bytes in $hashes call(s)"
  elif [ "$oks" -eq "$judged" ] && [ -n "${MIN_STALL:-}" ] && ! awk -v m="$MIN_STALL" \
    '/^CALL [0-9]* OK/ && $7 >= m { hit = 1 } END { exit !hit }' "$DIR"/rank*.log; then
    echo "no call lasted ${MIN_STALL}s: the fault missed every call (more calls=)"
  elif [ "$oks" -eq "$judged" ]; then echo ok
  elif [ "$errs" -eq "$judged" ] && [ "$unnamed" -eq 0 ]; then echo failed
  elif [ "$unnamed" -gt 0 ]; then echo "$unnamed rank(s) failed without naming a peer (or the bad argument)"
  elif [ "$errs" -gt 0 ] && [ $((oks + errs)) -eq "$judged" ] && [ -n "${LAST_CALL_OK:-}" ]; then
    # The fault hit the last call after some ranks' share of it was done: those return success
    # (as NCCL's would), the others an error; there is no later call for them to fail.
    echo failed
  else echo "$oks rank(s) completed, $errs failed: not every rank saw the failure"
  fi
}

report() {  # report EXPECTED SEEN
  local first counts
  first=$(grep -h '^CALL [0-9]* ERR\|^INIT ERR' "$DIR"/rank*.log 2>/dev/null | head -1 | cut -c1-160)
  # Calls over all ranks, for fault_campaign.sh: completed correctly, failed, wrong.
  counts=$(cat "$DIR"/rank*.log 2>/dev/null | awk '/^CALL [0-9]* OK/ { o++ } /^CALL [0-9]* ERR/ { e++ }
    /^CALL [0-9]* WRONG/ { w++ } END { printf "[calls ok=%d err=%d wrong=%d]", o, e, w }')
  # A sanitizer's report (build-tsan) fails the run whatever the ranks returned.
  if grep -q 'WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|runtime error:' "$DIR"/rank*.log; then
    echo "FAIL $SCENARIO $SETTINGS: a sanitizer report $counts"
    grep -h -A30 'WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|runtime error:' "$DIR"/rank*.log | head -80
    exit 1
  fi
  if [ "$1" = "$2" ]; then
    echo "PASS $SCENARIO $SETTINGS: $2 $counts${first:+ (first error: $first)}"
    exit 0
  fi
  echo "FAIL $SCENARIO $SETTINGS: expected $1, saw: $2 $counts"
  for ((i = 0; i < nranks; i++)); do echo "--- rank $i"; tail -5 "$DIR/rank$i.log"; done
  exit 1
}

# The call survives an outage after which its streams move again well within the timeout. A
# stopped rank moves again when continued, and so do the socket transport's streams when the link
# returns (their retransmission back-off is capped: Linux 6.15+). UCX's streams, which SketchCCL
# cannot tune, and older kernels' move at TCP's next doubled retransmission, up to about twice the
# outage after it began (docs/reliability.md).
expected_for_outage() {
  local resume=$down
  if [ "$SCENARIO" = linkdown ] &&
    ! { [ "$transport" = socket ] && [ -e /proc/sys/net/ipv4/tcp_rto_max_ms ]; }; then
    resume=$((2 * down + 1))
  fi
  awk -v r="$resume" -v d="$down" -v t="$timeout" \
    'BEGIN { print (r + 4 < t) ? "ok" : (d > t ? "failed" : "either") }'
}

# Waits for the ranks after an outage and reports what they saw against $want.
finish_outage() {
  local left seen
  left=$(wait_ranks "$bound")
  [ "$left" -eq 0 ] || report "$want" "$left rank(s) still running, silent for ${bound}s (hang)"
  seen=$(judge "$calls")
  [ "$want" = either ] && [ "$seen" = ok -o "$seen" = failed ] && want=$seen
  [ "$want" = failed ] && [ "$seen" = ok ] && seen="every call completed: the fault missed every call (more calls=)"
  report "$want" "$seen"
}

bound=$(awk -v t="$timeout" -v d="$down" 'BEGIN { printf "%d", 3 * t + d + 30 }')
case "$SCENARIO" in
  linkdown | partition)
    make_network
    GATED=1
    start_ranks
    wait_flowing || report ok "calls never started"
    inject ip -n "${NS}b" link set "rel$rank" down
    if [ "$SCENARIO" = linkdown ]; then
      sleep "$down"
      ip -n "${NS}b" link set "rel$rank" up
      want=$(expected_for_outage)
      MIN_STALL=$(awk -v d="$down" 'BEGIN { print d * 0.8 }')
    else
      want=failed
    fi
    finish_outage
    ;;
  stop)
    GATED=1
    start_ranks
    wait_flowing || report ok "calls never started"
    inject kill -STOP "${PIDS[$rank]}"
    sleep "$down"
    kill -CONT "${PIDS[$rank]}"
    want=$(expected_for_outage)
    MIN_STALL=$(awk -v d="$down" 'BEGIN { print d * 0.8 }')
    finish_outage
    ;;
  kill)
    GATED=1
    start_ranks
    wait_flowing || report failed "calls never started"
    inject kill -KILL "${PIDS[$rank]}"
    SKIP_RANK=$rank
    left=$(wait_ranks "$bound")
    [ "$left" -eq 0 ] || report failed "$left rank(s) still running, silent for ${bound}s (hang)"
    report failed "$(judge "$calls")"
    ;;
  badinput)
    BAD_RANK=$rank
    export FAULT_BAD="1:$rank:$bad"
    SETTINGS="$SETTINGS bad=$bad"
    start_ranks
    left=$(wait_ranks "$bound")
    [ "$left" -eq 0 ] || report failed "$left rank(s) still running, silent for ${bound}s (hang)"
    report failed "$(judge "$calls")"
    ;;
  abort)
    calls=1000  # never all done: the abort ends the run
    start_ranks "$down"
    wait_flowing || report failed "calls never started"
    kill -STOP "${PIDS[$rank]}"
    others=()
    for ((i = 0; i < nranks; i++)); do [ "$i" -eq "$rank" ] || others+=("${PIDS[$i]}"); done
    deadline=$((SECONDS + ${down%.*} + 30))
    while [ "$SECONDS" -lt "$deadline" ]; do
      alive=0
      for p in "${others[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
      [ "$alive" -eq 0 ] && break
      sleep 0.2
    done
    kill -KILL "${PIDS[$rank]}" 2>/dev/null
    [ "$alive" -eq 0 ] || report aborted "$alive rank(s) still in their call 30 s after ncclCommAbort"
    seen=aborted
    for ((i = 0; i < nranks; i++)); do
      [ "$i" -eq "$rank" ] && continue
      line=$(grep '^ABORTED' "$DIR/rank$i.log")
      [ -n "$line" ] || { seen="rank $i printed no ABORTED line"; break; }
      # ABORTED AT a CALL RETURNED AT b RSS_DELTA_MB m
      verdict=$(echo "$line" | awk '{ if ($7 == 0 || $7 - $3 > 3) print "slow"; else if ($9 > 64) print "held"; else print "ok" }')
      case "$verdict" in
        slow) seen="rank $i: the stalled call did not return within 3 s of ncclCommAbort ($line)"; break ;;
        held) seen="rank $i: the aborted communicator's memory was not freed ($line)"; break ;;
      esac
      grep -q '^CALL [0-9]* WRONG' "$DIR/rank$i.log" && { seen="rank $i: wrong result"; break; }
    done
    report aborted "$seen"
    ;;
  *) echo "fault.sh: unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
