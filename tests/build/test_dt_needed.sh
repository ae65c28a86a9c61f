#!/usr/bin/env bash
# No hard dependencies (a preloaded library must start anywhere): each product's DT_NEEDED names
# only parts of glibc (libc, libm, the loader; libpthread, libdl, librt as -Dportable names them),
# libstdc++ and libgcc_s. UCX, libibverbs and CUDA are opened with dlopen when first needed, so a preloaded
# process never loads them, nor CUDA, at start. Once loaded, UCX's own lines go to SketchCCL's
# log on stderr, never to the program's stdout.
#   test_dt_needed.sh LIBSKETCHCCL JAX_LIBNCCL SKETCHCCL_INFO
set -u
lib=$1 jax=$2 info=$3
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); return 1; fi
}
allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1)$'
needed_of() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for f in "$lib" "$jax"; do
  needs=$(needed_of "$f")
  echo "$f NEEDs: $(echo $needs)"
  check "$(basename "$f") NEEDs something (readelf works)" test -n "$needs"
  extra=$(grep -Ev "$allowed" <<<"$needs")
  check "$(basename "$f") NEEDs nothing beyond glibc, libstdc++, libgcc_s${extra:+ (extra: $(echo $extra))}" \
    test -z "$extra"
done
check "the JAX shim's SONAME is libnccl.so.2" \
  grep -q "(SONAME).*\[libnccl\.so\.2\]" <(readelf -d "$jax")
check "the JAX shim exports ncclAllReduce" grep -qw ncclAllReduce <(nm -D --defined-only "$jax")

# Loaded, initialised nothing: no UCX, verbs or CUDA library mapped, no thread started.
maps=$(env LD_PRELOAD="$lib" SKETCHCCL_DEBUG=WARN cat /proc/self/maps)
check "a preloaded process starts (cat exits 0)" test $? -eq 0
check "the preloaded library is mapped" grep -qF "$(readlink -f "$lib")" <<<"$maps"
for l in libucp libucs libuct libibverbs libcuda; do
  check "nothing maps $l at load time" bash -c "! grep -q '/$l\.so' <<<\"\$0\"" "$maps"
done
threads=$(env LD_PRELOAD="$lib" awk '/^Threads:/ {print $2}' /proc/self/status)
check "no thread is started at load time (Threads: $threads)" test "$threads" = 1

# sketchccl-info probes UCX; an unknown UCX_TLS makes UCX warn (when UCX is here at all).
if python3 -c 'import ctypes; ctypes.CDLL("libucp.so.0")' 2>/dev/null; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  UCX_TLS=no_such_transport "$info" >"$tmp/out" 2>"$tmp/err"
  check "UCX's warning reaches SketchCCL's log on stderr" \
    grep -q "SKETCHCCL WARN NET UCX .*no_such_transport" "$tmp/err" || cat "$tmp/err"
  check "... and nothing of UCX's log is on stdout" bash -c "! grep -q 'no_such_transport' '$tmp/out'"
else
  echo "ok   - (UCX is not installed here: its log routing not checked)"
fi
echo "$fails failure(s)"
test "$fails" -eq 0
