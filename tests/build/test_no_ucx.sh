#!/usr/bin/env bash
# A node without UCX (a preloaded library must start anywhere): in a mount namespace where
# libucp.so.0 is an empty file, processes preloading SketchCCL start, a standalone 2-rank
# AllReduce with SKETCHCCL_TRANSPORT=auto runs over sockets (saying so at INFO), and
# SKETCHCCL_TRANSPORT=ucx fails with a message naming libucp. Exit 77 (skipped) where user namespaces are not permitted.
#   test_no_ucx.sh LIBSKETCHCCL NO_UCX_WORKER
set -u
if [ "${1:-}" != --inside ]; then
  if ! unshare -rm true 2>/dev/null; then
    echo "SKIP: unshare -rm is not permitted here"
    exit 77
  fi
  exec unshare -rm "$0" --inside "$@"
fi
shift
lib=$1 worker=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); return 1; fi
}
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true

# Every libucp.so.0 the loader could find becomes an empty file (ld.so: "file too short").
ucp=$(ldconfig -p 2>/dev/null | awk '$1 == "libucp.so.0" {print $NF}')
for dir in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do [ -e "$dir/libucp.so.0" ] && ucp="$ucp $dir/libucp.so.0"; done
for f in $ucp; do
  mount --bind /dev/null "$(readlink -f "$f")" || { echo "FAIL - cannot hide $f"; exit 1; }
done
echo "hidden: ${ucp:-(no libucp.so.0 on this machine)}"
check "libucp.so.0 cannot be loaded here" \
  bash -c '! python3 -c "import ctypes; ctypes.CDLL(\"libucp.so.0\")" 2>/dev/null'

LD_PRELOAD=$lib /bin/true
check "LD_PRELOAD=libsketchccl.so /bin/true exits 0" test $? -eq 0
out=$(LD_PRELOAD=$lib bash -c 'echo started')
check "LD_PRELOAD=libsketchccl.so bash runs" test "$out" = started

run_pair() { # transport, output prefix: the two ranks, bounded
  export SKETCHCCL_NCCL_LIB=none SKETCHCCL_TRANSPORT=$1 SKETCHCCL_DEBUG=INFO \
    SKETCHCCL_MIN_BYTES=0 SKETCHCCL_CODEC=none SKETCHCCL_TIMEOUT=20
  rm -f "$tmp/id" "$tmp/id.ready"
  timeout 90 "$worker" 0 2 "$tmp/id" >"$2.0" 2>"$2.0.err" &
  local p0=$!
  timeout 90 "$worker" 1 2 "$tmp/id" >"$2.1" 2>"$2.1.err"
  local rc1=$?
  wait $p0
  local rc0=$?
  echo "$1: rank 0 exit $rc0, rank 1 exit $rc1"
  cat "$2.0" "$2.1"
  return $((rc0 != 0 || rc1 != 0))
}

run_pair auto "$tmp/auto"
check "SKETCHCCL_TRANSPORT=auto: the 2-rank AllReduce succeeds" test $? -eq 0
check "... both ranks print RESULT OK" test "$(cat "$tmp/auto.0" "$tmp/auto.1" | grep -c '^RESULT OK$')" = 2
check "... rank 0 says at INFO that it uses the socket transport" \
  grep -q "UCX unusable.*libucp.so.0.*using the socket transport" "$tmp/auto.0.err" ||
  cat "$tmp/auto.0.err"
check "... and prints no WARN line" bash -c "! grep -q ' WARN ' '$tmp/auto.0.err' '$tmp/auto.1.err'"

run_pair ucx "$tmp/ucx"
check "SKETCHCCL_TRANSPORT=ucx: fails" test $? -ne 0
check "... with a message naming libucp.so.0" \
  grep -q "libucp.so.0" "$tmp/ucx.0" "$tmp/ucx.0.err" || cat "$tmp/ucx.0" "$tmp/ucx.0.err"
echo "$fails failure(s)"
test "$fails" -eq 0
