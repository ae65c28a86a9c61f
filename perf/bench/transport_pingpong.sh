#!/bin/sh
# Ping-pong of SketchCCL's ucx and socket transports against ucx_perftest (tag_lat, the same
# ping-pong on UCX's own tag API) on loopback, in one run. Prints one table with ratios:
#   ours/perftest latency (>1: slower) and ours/perftest bandwidth (<1: slower).
# Usage: perf/bench/transport_pingpong.sh [path/to/sccl-transport-pingpong] [UCX_TLS or default]
set -eu
BIN=${1:-build/perf/bench/sccl-transport-pingpong}
TLS=${2:-tcp}
if [ "$TLS" = default ]; then unset UCX_TLS; else export UCX_TLS="$TLS"; fi
export SKETCHCCL_SOCKET_IFNAME=lo UCX_WARN_UNUSED_ENV_VARS=n
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not installed (ucx-utils)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BIN" --transport ucx > "$tmp/ucx.txt"
"$BIN" --transport socket > "$tmp/socket.txt"

port=$((20000 + $$ % 20000))
: > "$tmp/perftest.txt"
for size in 8 64 512 4096 32768 262144 2097152 16777216 67108864; do
  iters=$(( 536870912 / size )); [ $iters -lt 8 ] && iters=8; [ $iters -gt 20000 ] && iters=20000
  port=$((port + 1))
  timeout 120 ucx_perftest -p $port -t tag_lat -s $size -n $iters > /dev/null 2>&1 &
  spid=$!
  out=""
  for try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.2
    out=$(timeout 120 ucx_perftest 127.0.0.1 -p $port -t tag_lat -s $size -n $iters 2>/dev/null \
          | awk '/^Final:/ {print $3, $5}') && [ -n "$out" ] && break
  done
  wait $spid 2>/dev/null || true
  # Final: <iters> <p50 us> <average us> <overall us> ... (we keep p50 and overall)
  echo "$size $out" >> "$tmp/perftest.txt"
done

echo "UCX_TLS=${UCX_TLS:-default}; one-way latency (median of half round trips, us) and bandwidth (MB/s = bytes / median one-way time)"
printf '%10s | %9s %9s %9s | %9s %9s %9s | %7s %7s %7s %7s\n' bytes pt_lat ucx_lat sock_lat \
  pt_MB/s ucx_MB/s sock_MB/s ucx/pt sock/pt ucx/pt sock/pt
printf '%10s | %29s | %29s | %15s %15s\n' "" "latency" "bandwidth" "lat ratio" "bw ratio"
awk '
  FILENAME ~ /ucx.txt$/ && $1 !~ /^#/ { ul[$1]=$2; ub[$1]=$4; next }
  FILENAME ~ /socket.txt$/ && $1 !~ /^#/ { sl[$1]=$2; sb[$1]=$4; next }
  FILENAME ~ /perftest.txt$/ {
    s=$1; pl=$2; pb=(pl > 0) ? s / pl : 0;
    printf "%10d | %9.2f %9.2f %9.2f | %9.1f %9.1f %9.1f | %7.2f %7.2f %7.2f %7.2f\n",
      s, pl, ul[s], sl[s], pb, ub[s], sb[s],
      (pl > 0) ? ul[s] / pl : 0, (pl > 0) ? sl[s] / pl : 0,
      (pb > 0) ? ub[s] / pb : 0, (pb > 0) ? sb[s] / pb : 0
  }' "$tmp/ucx.txt" "$tmp/socket.txt" "$tmp/perftest.txt"
