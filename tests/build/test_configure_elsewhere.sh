#!/usr/bin/env bash
# A second configure, as on a cluster: nccl.h (and a stub libnccl.so.2) only under an unusual
# prefix named by $NCCL_HOME, CUDA and UCX off, -Dportable. With --build (the long form), its
# library and two unit tests are built and run, its install is checked file by file, and its
# library needs no libstdc++ and no glibc newer than docs/building.md says; the main build's
# sketchccl-perf runs 2 ranks on that library. Without it, the configure checks only.
set -u
build_too=0
[ "${1:-}" = --build ] && { build_too=1; shift; }
src=$1 nccl_dir=$2 cuda_dir=$3 meson=$4 perf=$5 version=$6
max_glibc=2.18  # docs/building.md, "Portable library"
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); return 1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') NCCL_HOME UCX_HOME HPCX_UCX_DIR 2>/dev/null || true
export HOME=$tmp
jobs=${SKETCHCCL_BUILD_TEST_JOBS:-2}

# NCCL at an odd prefix: its nccl.h with a patch version no other copy has, and a stub library.
nccl=$tmp/opt/nccl-odd
mkdir -p "$nccl/include" "$nccl/lib"
sed 's/^#define NCCL_PATCH .*/#define NCCL_PATCH 77/' "$nccl_dir/nccl.h" >"$nccl/include/nccl.h"
printf 'int ncclGetVersion(int* v) { *v = 22877; return 0; }\n' >"$tmp/stub.c"
cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$nccl/lib/libnccl.so.2" "$tmp/stub.c"

NCCL_HOME=$nccl "$meson" setup "$tmp/build" "$src" --prefix=/opt/sketchccl -Dunit_tests_only=true \
  -Dcuda=disabled -Ducx=disabled -Dportable=true >"$tmp/setup.log" 2>&1
check "configure with NCCL_HOME, CUDA and UCX off, portable: exits 0" test $? -eq 0 ||
  { cat "$tmp/setup.log"; echo "$fails failure(s)"; exit 1; }
check "nccl.h taken from \$NCCL_HOME" grep -qF "nccl.h: $nccl/include (\$NCCL_HOME)" "$tmp/setup.log"
check "built against that nccl.h (patch 77)" \
  grep -qE 'SKETCHCCL_NCCL_HEADER_VERSION "[0-9]+\.[0-9]+\.77"' "$tmp/build/sketchccl_build_config.h"
check "UCX and CUDA are off" grep -qE 'SKETCHCCL_HAVE_(UCX|CUDA) 0' "$tmp/build/sketchccl_build_config.h"

# A wrong -Dnccl_home stops the configure, naming where it looked.
"$meson" setup "$tmp/bad" "$src" -Dunit_tests_only=true -Dcuda=disabled -Ducx=disabled \
  -Dnccl_home="$tmp/nowhere" >"$tmp/bad.log" 2>&1
check "a wrong -Dnccl_home fails the configure" test $? -ne 0
check "... naming where it looked" grep -qF "nccl.h is not in $tmp/nowhere/include" "$tmp/bad.log"

# -Dnccl_home=python: nccl.h and cuda_runtime.h from wheel folders (nvidia/nccl, nvidia/cuda_runtime)
# on python3's path, as PyTorch's pip wheels lay them out. Configure only.
if [ -f "$cuda_dir/cuda_runtime.h" ]; then
  site=$tmp/site-packages/nvidia
  mkdir -p "$site/nccl/include" "$site/cuda_runtime"
  sed 's/^#define NCCL_PATCH .*/#define NCCL_PATCH 78/' "$nccl_dir/nccl.h" >"$site/nccl/include/nccl.h"
  ln -s "$cuda_dir" "$site/cuda_runtime/include"
  PYTHONPATH=$tmp/site-packages "$meson" setup "$tmp/pip" "$src" -Dunit_tests_only=true \
    -Dcuda=disabled -Ducx=disabled -Dnccl_home=python >"$tmp/pip.log" 2>&1
  check "configure with -Dnccl_home=python and a wheel layout exits 0" test $? -eq 0 ||
    tail -20 "$tmp/pip.log"
  check "nccl.h taken from the wheel" \
    grep -qF "nccl.h: $site/nccl/include (-Dnccl_home=python" "$tmp/pip.log"
  check "built against the wheel's nccl.h (patch 78)" \
    grep -qE 'SKETCHCCL_NCCL_HEADER_VERSION "[0-9]+\.[0-9]+\.78"' "$tmp/pip/sketchccl_build_config.h"
else
  echo "skip - -Dnccl_home=python: no cuda_runtime.h directory to lay out as a wheel"
fi

if [ "$build_too" = 0 ]; then
  echo "$fails failure(s) (configure only; the portable build: --build, suite long)"
  test "$fails" -eq 0
  exit
fi

# The library and two unit tests: the packets' golden hashes (the portable build's codec loops
# must write the main build's bytes) and the configuration table. The whole unit suite runs in
# the main build and in the ASan build; building it a third time here would double this test.
ninja -C "$tmp/build" -j "$jobs" "libsketchccl.so.$version" tests/unit/unit_kernels_codec_golden \
  tests/unit/unit_core_config >"$tmp/ninja.log" 2>&1
check "library and the unit tests it runs build" test $? -eq 0 || { tail -40 "$tmp/ninja.log"; }
"$meson" test -C "$tmp/build" --no-rebuild --num-processes "$jobs" kernels_codec_golden \
  core_config >"$tmp/test.log" 2>&1
check "the portable build's golden-packet and configuration tests pass" test $? -eq 0 ||
  tail -30 "$tmp/test.log"
grep -E '^(Ok|Fail|Skipped):' "$tmp/test.log"

DESTDIR= "$meson" install -C "$tmp/build" --no-rebuild --quiet --destdir "$tmp/dest" \
  >"$tmp/install.log" 2>&1
check "install exits 0" test $? -eq 0 || cat "$tmp/install.log"
libdir=$("$meson" introspect "$tmp/build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
case "$libdir" in /*) ;; *) libdir=/opt/sketchccl/$libdir ;; esac
doc=/opt/sketchccl/share/doc/sketchccl
{
  printf '%s\n' "$libdir/libsketchccl.so" "$libdir/libsketchccl.so.${version%%.*}" \
    "$libdir/libsketchccl.so.$version" "$libdir/pkgconfig/sketchccl.pc" \
    /opt/sketchccl/include/sketchccl/sketchccl.h "$doc/README.md" "$doc/LICENSE" \
    "$doc/CHANGELOG.md"
  (cd "$src" && find docs -type f) | sed "s|^|$doc/|"
} | sort >"$tmp/expected"
(cd "$tmp/dest" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort) >"$tmp/installed"
check "installed files (library, header, pkg-config, docs; no tools here) are exactly these" \
  diff -u "$tmp/expected" "$tmp/installed"

lib=$tmp/dest$libdir/libsketchccl.so.$version
objdump -T "$lib" >"$tmp/dynsym"
objdump -p "$lib" >"$tmp/headers"
check "portable: no GLIBCXX, CXXABI or GCC symbol versions" bash -c "! grep -qE '(GLIBCXX|CXXABI|GCC)_[0-9]' '$tmp/dynsym'"
check "portable: libstdc++ and libgcc_s are not needed" bash -c "! grep -qE 'NEEDED +lib(stdc\+\+|gcc_s)' '$tmp/headers'"
check "portable: libstdc++ is not exported (std::terminate, __cxa_throw)" \
  bash -c "! grep -vF '*UND*' '$tmp/dynsym' | grep -qE ' (_ZSt9terminatev|__cxa_throw)\$'"
check "portable: exports only nccl*, pnccl* and sketchccl*" \
  bash -c "! grep -vF '*UND*' '$tmp/dynsym' | awk '/ DF | DO /{print \$NF}' | grep -qvE '^(p?nccl|sketchccl)'"
check "portable: exports ncclAllReduce" grep -qE ' ncclAllReduce$' "$tmp/dynsym"
highest=$(grep -oE '\(GLIBC_[0-9.]+\)' "$tmp/dynsym" | tr -d '()' | sed 's/GLIBC_//' | sort -V | tail -1)
echo "highest glibc symbol version: $highest (documented: $max_glibc)"
check "portable: highest GLIBC version is $max_glibc" test "$highest" = "$max_glibc"
for old in libpthread.so.0 libdl.so.2 librt.so.1; do
  check "portable: $old is named (glibc before 2.34 has the bound symbols there)" \
    grep -q "NEEDED *$old" "$tmp/headers"
done

# The portable library at work: 2 ranks, q8 and sparse, standalone (threads, sockets, dlopen).
for codec in q8 sparse; do
  SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=30 timeout 60 "$perf" --lib "$lib" --nranks 2 \
    -b 1M -e 1M -n 2 -w 1 --codec $codec >"$tmp/perf" 2>&1
  check "portable library runs 2 ranks with --codec $codec" test $? -eq 0 || cat "$tmp/perf"
done

echo "$fails failure(s)"
test "$fails" -eq 0
