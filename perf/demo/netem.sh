#!/usr/bin/env bash
# An emulated slow cluster on one machine: N network namespaces joined through a bridge or as a
# ring, each link rate-limited with `tc tbf` (default 1 Gbit/s), and the AllReduce sweep run
# inside them: sketchccl-perf per codec over UCX (tcp) and the socket transport, and Open MPI's
# MPI_Allreduce (mpi-allreduce-perf) as the peer baseline. Everything it creates is deleted on
# exit, also when interrupted. Needs root (namespaces); --loopback runs the same without them.
#
#   perf/demo/netem.sh [options] [-- sketchccl-perf flags, e.g. -b 1M -e 64M -f 2 -n 3 -w 1]
#
# Options:
#   --nranks N            ranks (default 4)
#   --ranks-per-node L    ranks per namespace (default 1): namespace k is node k (its
#                         SKETCHCCL_HOSTID), ranks placed node by node; they talk inside a
#                         node over its own address (loopback), between nodes over the links
#   --topology T          bridge | ring (default bridge)
#   --rate R              tbf rate of every link (default 1gbit); none: unshaped veth links
#   --build DIR           build directory holding perf/bench/sketchccl-perf (default build)
#   --codecs LIST         comma-separated (default none,q8); s2 and sparse get --sparse-data;
#                         CODEC@flat runs it with SKETCHCCL_HIERARCHY=flat (one ring over all);
#                         CODEC@ring and CODEC@twoshot with that SKETCHCCL_ALGO (auto's choice
#                         of schedule beside both forced)
#   --data D              data for the other codecs (default gauss)
#   --sparse-data D       data for s2 and sparse (default sparse:0.01)
#   --transports LIST     ucx,socket (default ucx,socket)
#   --mpi LIST            Open MPI baselines: ring,default, or none (default ring,default)
#   --out DIR             keep every run's table in DIR/<transport>-<codec>.txt (default: a temp dir)
#   --loopback            no namespaces: all ranks on loopback (not a slow network)
#   --timeout S           per-run limit in seconds (default 300)
#   --exec                instead of the sweeps, run the words after -- as one command in the
#                         root namespace while the network exists (its ranks enter the
#                         namespaces scclns0.. themselves, e.g. ddp-train --netns scclns);
#                         exits with its status (under --timeout)
#   --prefix P            name the namespaces P0.. and Pbr (default scclns0.. and scclbr): a
#                         network of its own beside the default one, with its own lock
# Namespaces are named scclns0.. and scclbr; addresses are 10.88.0.0/24 inside them only; a run
# holds /tmp/sketchccl-netem.lock (another prefix: /tmp/sketchccl-netem-P.lock) while they exist
# (a second run waits).
set -euo pipefail

NRANKS=4 RPN=1 TOPO=bridge RATE=1gbit BUILD=build CODECS=none,q8 DATA=gauss SPARSE_DATA=sparse:0.01
TRANSPORTS=ucx,socket MPI=ring,default OUT= LOOPBACK=0 TIMEOUT=300 EXEC=0 GIVEN=0
SWEEP=(-b 1M -e 64M -f 2 -n 3 -w 1)
PREFIX=scclns BRNS=scclbr LOCK=/tmp/sketchccl-netem.lock

die() { echo "netem.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nranks) NRANKS=${2:?}; shift 2 ;;
    --ranks-per-node) RPN=${2:?}; shift 2 ;;
    --topology) TOPO=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --build) BUILD=${2:?}; shift 2 ;;
    --codecs) CODECS=${2:?}; shift 2 ;;
    --data) DATA=${2:?}; shift 2 ;;
    --sparse-data) SPARSE_DATA=${2:?}; shift 2 ;;
    --transports) TRANSPORTS=${2:?}; shift 2 ;;
    --mpi) MPI=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --loopback) LOOPBACK=1; shift ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --exec) EXEC=1; shift ;;
    --prefix) PREFIX=${2:?}; BRNS=${2}br; shift 2 ;;
    --) shift; SWEEP=("$@"); GIVEN=1; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$NRANKS" =~ ^[0-9]+$ ]] && [ "$NRANKS" -ge 2 ] && [ "$NRANKS" -le 64 ] || die "--nranks: 2..64"
[ "$TOPO" = bridge ] || [ "$TOPO" = ring ] || die "--topology: bridge | ring"
[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix: a lowercase name of up to 8 characters"
[ "$PREFIX" = scclns ] || LOCK=/tmp/sketchccl-netem-$PREFIX.lock
[ "$EXEC" = 0 ] || { [ "$GIVEN" = 1 ] && [ ${#SWEEP[@]} -gt 0 ]; } || die "--exec needs a command after --"
[[ "$RPN" =~ ^[0-9]+$ ]] && [ "$RPN" -ge 1 ] && [ $((NRANKS % RPN)) -eq 0 ] ||
  die "--ranks-per-node: a divisor of --nranks"
[ "$RPN" = 1 ] || [ "$TOPO" = bridge ] || die "--ranks-per-node needs --topology bridge"
NNS=$((NRANKS / RPN))  # namespaces: one per node
PERF=$(readlink -f "$BUILD/perf/bench/sketchccl-perf" 2>/dev/null || true)
MPIPERF=$(readlink -f "$BUILD/perf/bench/mpi-allreduce-perf" 2>/dev/null || true)
[ -x "$PERF" ] || die "$BUILD/perf/bench/sketchccl-perf not built (ninja -C $BUILD)"
if [ "$LOOPBACK" = 0 ] && [ "$(id -u)" -ne 0 ]; then die "namespaces need root (or use --loopback)"; fi

# One emulated network at a time: the namespaces have fixed names, and a second run's cleanup
# would delete the first's. A run waits for the one before it (up to --timeout).
if [ "$LOOPBACK" = 0 ]; then
  exec 9>"$LOCK"
  flock -w "$TIMEOUT" 9 || die "another netem.sh run held the emulated network for ${TIMEOUT}s ($LOCK)"
fi
WORK=$(mktemp -d /tmp/sccl-netem.XXXXXX)
[ -n "$OUT" ] || OUT=$WORK/out
mkdir -p "$OUT"
PIDS=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  if [ "$LOOPBACK" = 0 ]; then
    for ((i = 0; i < NNS; i++)); do ip netns del "$PREFIX$i" 2>/dev/null || true; done
    ip netns del "$BRNS" 2>/dev/null || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'; }
# Packets the tbf qdiscs dropped so far (all links): drops mean TCP retransmissions.
tbf_drops() {
  [ "$LOOPBACK" = 1 ] && { echo 0; return; }
  {
    for ((i = 0; i < NNS; i++)); do ip netns exec "$PREFIX$i" tc -s qdisc show; done
    if [ "$TOPO" = bridge ]; then ip netns exec "$BRNS" tc -s qdisc show; fi
  } 2>/dev/null | awk '/tbf/ { t = 1 } t && /dropped/ { gsub(",", ""); for (k = 1; k < NF; k++) if ($k == "dropped") s += $(k + 1); t = 0 } END { print s + 0 }'
}
# Bytes each node's link has carried out of it so far (its tbf's "Sent"), space-separated.
node_link_bytes() {
  [ "$LOOPBACK" = 1 ] && { echo 0; return; }
  for ((i = 0; i < NNS; i++)); do
    ip netns exec "$PREFIX$i" tc -s qdisc show dev eth0 2>/dev/null |
      awk '/^ *Sent/ { print $2; exit }'
  done | paste -sd' '
}
addr() { echo "10.88.0.$(($1 + 1))"; }

setup_bridge() {
  ip netns add "$BRNS"
  ip netns exec "$BRNS" ip link set lo up
  ip netns exec "$BRNS" ip link add br0 type bridge
  ip netns exec "$BRNS" ip link set br0 up
  for ((i = 0; i < NNS; i++)); do
    local ns=$PREFIX$i
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link add eth0 type veth peer name vb$i netns "$BRNS"
    ip netns exec "$ns" ip addr add "$(addr $i)/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$BRNS" ip link set vb$i master br0
    ip netns exec "$BRNS" ip link set vb$i up
    # both directions of the link: the namespace's upload and its download
    [ "$RATE" = none ] || ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 256kb latency 10ms
    [ "$RATE" = none ] || ip netns exec "$BRNS" tc qdisc replace dev vb$i root tbf rate "$RATE" burst 256kb latency 10ms
  done
  ip netns exec "$BRNS" ip addr add 10.88.0.254/24 dev br0
}

# Ring: namespace i has rn$i (its link to i+1, carrying its address) and rp$i (from i-1).
# Neighbours are one hop away; others are reached hop by hop the shorter way round.
setup_ring() {
  for ((i = 0; i < NRANKS; i++)); do
    ip netns add "$PREFIX$i"
    ip netns exec "$PREFIX$i" ip link set lo up
    ip netns exec "$PREFIX$i" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.default.rp_filter=0
  done
  for ((i = 0; i < NRANKS; i++)); do
    local j=$(((i + 1) % NRANKS))
    ip netns exec "$PREFIX$i" ip link add rn$i type veth peer name rp$j netns "$PREFIX$j"
  done
  for ((i = 0; i < NRANKS; i++)); do
    local ns=$PREFIX$i
    ip netns exec "$ns" ip addr add "$(addr $i)/24" dev rn$i noprefixroute
    for d in rn$i rp$i; do
      ip netns exec "$ns" sysctl -qw net.ipv4.conf.$d.rp_filter=0
      ip netns exec "$ns" ip link set $d up
      [ "$RATE" = none ] || ip netns exec "$ns" tc qdisc replace dev $d root tbf rate "$RATE" burst 256kb latency 10ms
    done
  done
  for ((i = 0; i < NRANKS; i++)); do
    local ns=$PREFIX$i next=$(((i + 1) % NRANKS)) prev=$(((i + NRANKS - 1) % NRANKS))
    for ((j = 0; j < NRANKS; j++)); do
      [ $j = $i ] && continue
      local d=$(((j - i + NRANKS) % NRANKS))
      if [ $d -le $((NRANKS / 2)) ]; then
        if [ $j = $next ]; then
          ip netns exec "$ns" ip route add "$(addr $j)/32" dev rn$i src "$(addr $i)"
        else
          ip netns exec "$ns" ip route add "$(addr $j)/32" via "$(addr $next)" dev rn$i onlink src "$(addr $i)"
        fi
      else
        if [ $j = $prev ]; then
          ip netns exec "$ns" ip route add "$(addr $j)/32" dev rp$i src "$(addr $i)"
        else
          ip netns exec "$ns" ip route add "$(addr $j)/32" via "$(addr $prev)" dev rp$i onlink src "$(addr $i)"
        fi
      fi
    done
  done
}

# Runs one command per rank (rank i in namespace i), waits, keeps rank 0's output.
# run_ranks OUTFILE ENV... -- CMD...
run_ranks() {
  local outfile=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  PIDS=()
  local idf=$WORK/id.$RANDOM.$RANDOM
  for ((i = 0; i < NRANKS; i++)); do
    local ifn=eth0 node=$((i / RPN))
    [ "$TOPO" = ring ] && ifn=rn$i
    local pre=()
    if [ "$LOOPBACK" = 0 ]; then
      pre=(ip netns exec "$PREFIX$node")
      envs_i=("${envs[@]}" SKETCHCCL_SOCKET_IFNAME="=$ifn" UCX_NET_DEVICES="$ifn")
    else
      envs_i=("${envs[@]}")
    fi
    [ "$RPN" -gt 1 ] && envs_i+=(SKETCHCCL_HOSTID="node$node")
    if [ $i = 0 ]; then
      timeout "$TIMEOUT" "${pre[@]}" env "${envs_i[@]}" "$@" --rank $i --nranks "$NRANKS" \
        --id-file "$idf" >"$outfile" 2>"$outfile.err.$i" &
    else
      timeout "$TIMEOUT" "${pre[@]}" env "${envs_i[@]}" "$@" --rank $i --nranks "$NRANKS" \
        --id-file "$idf" >/dev/null 2>"$outfile.err.$i" &
    fi
    PIDS+=($!)
  done
  local rc=0 r=0 st
  for p in "${PIDS[@]}"; do
    st=0
    wait "$p" || st=$?
    if [ $st -ne 0 ]; then
      rc=$st
      echo "netem.sh: rank $r exited with status $st$([ $st -gt 128 ] && echo " (signal $((st - 128)))")" \
        >>"$outfile.err.$r"
    fi
    r=$((r + 1))
  done
  PIDS=()
  rm -f "$idf"
  return $rc
}

run_mpi() {  # run_mpi OUTFILE ALGO
  local outfile=$1 algo=$2 args=()
  [ "$algo" = ring ] && args=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4)
  local common=(--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,tcp
                --mca mpi_yield_when_idle 1 "${args[@]}")
  if [ "$LOOPBACK" = 1 ]; then
    timeout "$TIMEOUT" mpirun "${common[@]}" --mca btl_tcp_if_include lo -np "$NRANKS" \
      "$MPIPERF" "${MPI_SWEEP[@]}" >"$outfile" 2>"$outfile.err" &
  else
    local apps=()
    for ((i = 0; i < NRANKS; i++)); do
      [ $i -gt 0 ] && apps+=(:)
      apps+=(-np 1 ip netns exec "$PREFIX$((i / RPN))" "$MPIPERF" "${MPI_SWEEP[@]}")
    done
    # mpirun inside namespace 0, its PMIx server on the namespaces' network (NETEM_NOTES.md)
    timeout "$TIMEOUT" ip netns exec "${PREFIX}0" env PMIX_MCA_ptl_tcp_remote_connections=1 \
      PMIX_MCA_ptl_tcp_if_include=10.88.0.0/24 \
      mpirun "${common[@]}" --mca btl_tcp_if_include 10.88.0.0/24 \
      --mca oob_tcp_if_include 10.88.0.0/24 "${apps[@]}" >"$outfile" 2>"$outfile.err" &
  fi
  PIDS=($!)
  local rc=0
  wait "${PIDS[0]}" || rc=$?
  PIDS=()
  return $rc
}

if [ "$LOOPBACK" = 0 ]; then
  for ((i = 0; i < 64; i++)); do ip netns del "$PREFIX$i" 2>/dev/null || true; done  # stale, ours
  ip netns del "$BRNS" 2>/dev/null || true
  if [ "$TOPO" = bridge ]; then setup_bridge; else setup_ring; fi
  if [ "$RPN" -gt 1 ]; then
    echo "# netem: $NNS namespaces as nodes of $RPN ranks ($TOPO), tc tbf $RATE per node link," \
      "nodes at 10.88.0.1-$NNS"
  else
    echo "# netem: $NRANKS namespaces ($TOPO), tc tbf $RATE per link, ranks at 10.88.0.1-$NRANKS"
  fi
else
  echo "# netem: --loopback: $NRANKS ranks on loopback (not a slow network)"
fi

if [ "$EXEC" = 1 ]; then
  [ "$GIVEN" = 1 ] && [ ${#SWEEP[@]} -gt 0 ] || die "--exec needs a command after --"
  timeout "$TIMEOUT" "${SWEEP[@]}" &
  PIDS=($!)
  st=0
  wait "${PIDS[0]}" || st=$?
  PIDS=()
  exit $st
fi

# The sweep flags without sketchccl-perf-only ones, for the MPI baseline.
MPI_SWEEP=()
for ((k = 0; k < ${#SWEEP[@]}; k++)); do
  case "${SWEEP[$k]}" in
    -b|-e|-f|-n|-w|-i|-c) MPI_SWEEP+=("${SWEEP[$k]}" "${SWEEP[$((k + 1))]}"); k=$((k + 1)) ;;
  esac
done

# The bytes each node's link carried during one run, into OUT/node_bytes.txt: LABEL B0 B1 ...
record_node_bytes() {
  [ "$LOOPBACK" = 1 ] && return 0
  local before=($2) after=($(node_link_bytes)) line=$1
  for ((k = 0; k < ${#after[@]}; k++)); do line+=" $((after[k] - ${before[k]:-0}))"; done
  echo "$line" >>"$OUT/node_bytes.txt"
}
rm -f "$OUT/node_bytes.txt"

status=0
IFS=, read -r -a codec_list <<<"$CODECS"
IFS=, read -r -a transport_list <<<"$TRANSPORTS"
for tr in "${transport_list[@]}"; do
  for c in "${codec_list[@]}"; do
    d=$DATA
    case "$c" in s2|sparse|*@sparse) d=$SPARSE_DATA ;; esac
    name=${c%@*}
    label=$tr-$c
    env=(SKETCHCCL_NCCL_LIB=none SKETCHCCL_TRANSPORT="$tr" UCX_TLS=tcp SKETCHCCL_TIMEOUT=60
         SKETCHCCL_DEBUG="${SKETCHCCL_DEBUG:-WARN}" SKETCHCCL_DEBUG_SUBSYS="${SKETCHCCL_DEBUG_SUBSYS:-^COLL}")
    case "$c" in
      *@flat) env+=(SKETCHCCL_HIERARCHY=flat) ;;  # one ring over every rank
      *@ring) env+=(SKETCHCCL_ALGO=ring) ;;
      *@twoshot) env+=(SKETCHCCL_ALGO=twoshot) ;;
      *@*) d=$SPARSE_DATA ;;  # "none@sparse": a codec on the sparse data
    esac
    extra=()
    t0=$(date +%s.%N) d0=$(tbf_drops) b0=$(node_link_bytes)
    if run_ranks "$OUT/$label.txt" "${env[@]}" -- "$PERF" --codec "$name" --data "$d" "${extra[@]}" \
        "${SWEEP[@]}"; then
      printf '# %s (%s, data %s): %.1f s, %d packets dropped by tbf\n' "$label" "$tr" "$d" \
        "$(elapsed "$t0")" $(($(tbf_drops) - d0))
      record_node_bytes "$label" "$b0"
      grep -v '^#' "$OUT/$label.txt" | sed "s/^/$label /"
    else
      echo "# $label FAILED (rank 0 output and stderr in $OUT/$label.txt*); rows rank 0 printed:"
      grep -v '^#' "$OUT/$label.txt" | sed "s/^/$label /"
      cat "$OUT/$label.txt".err.* >&2 || true
      status=1
    fi
  done
done
if [ "$MPI" != none ] && [ -x "$MPIPERF" ]; then
  IFS=, read -r -a mpi_list <<<"$MPI"
  for algo in "${mpi_list[@]}"; do
    t0=$(date +%s.%N) d0=$(tbf_drops) b0=$(node_link_bytes)
    if run_mpi "$OUT/mpi-$algo.txt" "$algo"; then
      record_node_bytes "mpi-$algo" "$b0"
      printf '# mpi-%s (Open MPI MPI_Allreduce, %s algorithm, btl tcp): %.1f s, %d packets dropped by tbf\n' \
        "$algo" "$algo" "$(elapsed "$t0")" $(($(tbf_drops) - d0))
      grep -v '^#' "$OUT/mpi-$algo.txt" | sed "s/^/mpi-$algo /"
    else
      echo "# mpi-$algo FAILED:" >&2
      cat "$OUT/mpi-$algo.txt.err" >&2 || true
      status=1
    fi
  done
elif [ "$MPI" != none ]; then
  echo "# Open MPI baseline skipped: $BUILD/perf/bench/mpi-allreduce-perf not built (libopenmpi-dev)" >&2
fi
exit $status
