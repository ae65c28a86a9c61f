#!/usr/bin/env bash
# meson install --destdir of this build: every file where it belongs (nothing else), the library's
# SONAME, the public header without nccl.h, the pkg-config file, the installed sketchccl-info,
# sketchccl-run and sketchccl-perf finding the installed library, and the installed Python
# package bound to it.
set -u
build=$1 src=$2 prefix=$3 bindir=$4 libdir=$5 includedir=$6 datadir=$7 version=$8 pydir=${9:-}
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); return 1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') 2>/dev/null || true
export HOME=$tmp SKETCHCCL_NCCL_LIB=none SKETCHCCL_TIMEOUT=30
abs() { case "$1" in /*) echo "$1" ;; *) echo "$prefix/$1" ;; esac; }
bin=$(abs "$bindir") lib=$(abs "$libdir") inc=$(abs "$includedir") doc=$(abs "$datadir")/doc/sketchccl
major=${version%%.*}

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/dest" >"$tmp/install.log" 2>&1
check "meson install --destdir exits 0" test $? -eq 0 || cat "$tmp/install.log"
root=$tmp/dest

{
  printf '%s\n' "$bin/sketchccl-info" "$bin/sketchccl-run" "$bin/sketchccl-perf" \
    "$lib/libsketchccl.so" "$lib/libsketchccl.so.$major" "$lib/libsketchccl.so.$version" \
    "$lib/pkgconfig/sketchccl.pc" "$inc/sketchccl/sketchccl.h" \
    "$doc/README.md" "$doc/LICENSE" "$doc/CHANGELOG.md" \
    "$lib/sketchccl/jax/libnccl.so.2"
  (cd "$src" && find docs -type f) | sed "s|^|$doc/|"
  if [ -n "$pydir" ]; then
    for f in __init__.py _library.py _nccl.py torch.py; do echo "$(abs "$pydir")/$f"; done
  fi
} | sort >"$tmp/expected"
(cd "$root" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort) >"$tmp/installed"
check "installed files are exactly the expected ones" diff -u "$tmp/expected" "$tmp/installed"
check "libsketchccl.so -> .so.$major -> .so.$version" \
  test "$(readlink "$root$lib/libsketchccl.so")" = "libsketchccl.so.$major" -a \
       "$(readlink "$root$lib/libsketchccl.so.$major")" = "libsketchccl.so.$version"
check "SONAME is libsketchccl.so.$major" \
  grep -q "SONAME *libsketchccl.so.$major\$" <(objdump -p "$root$lib/libsketchccl.so.$version")
check "the JAX shim's SONAME is libnccl.so.2" \
  grep -q "SONAME *libnccl.so.2\$" <(objdump -p "$root$lib/sketchccl/jax/libnccl.so.2")
check "public header does not include nccl.h" bash -c "! grep -q nccl.h <(grep '#include' '$root$inc/sketchccl/sketchccl.h')"

# A program built from the pkg-config file alone, against the installed header and library.
printf '#include <stdio.h>\n#include <sketchccl/sketchccl.h>\nint main(void) { puts(sketchcclGetVersionString()); return 0; }\n' >"$tmp/use.c"
flags=$(PKG_CONFIG_PATH=$root$lib/pkgconfig pkg-config --define-variable=prefix="$root$prefix" --cflags --libs sketchccl)
check "pkg-config flags name the installed tree" grep -q "$root" <<<"$flags"
cc -o "$tmp/use" "$tmp/use.c" $flags >"$tmp/cc.log" 2>&1
check "a C program builds with pkg-config's flags only" test $? -eq 0 || cat "$tmp/cc.log"
check "it runs and prints $version" test "$(LD_LIBRARY_PATH=$root$lib "$tmp/use")" = "$version"

"$root$bin/sketchccl-info" >"$tmp/info" 2>&1
check "installed sketchccl-info exits 0" test $? -eq 0 || cat "$tmp/info"
check "installed sketchccl-info reads the installed library's glibc needs" \
  grep -qE "^  needs glibc [0-9.]+ or newer" "$tmp/info"
highest=$(objdump -T "$root$lib/libsketchccl.so.$version" | grep -oE '\(GLIBC_[0-9.]+\)' | tr -d '()' |
  sed 's/GLIBC_//' | sort -V | tail -1)
check "... the same glibc as objdump -T ($highest)" grep -qF "needs glibc $highest or newer" "$tmp/info"
check "installed sketchccl-info names the installed library" \
  grep -qF "$(readlink -f "$root$lib/libsketchccl.so.$version")" "$tmp/info"

"$root$bin/sketchccl-run" -- cat /proc/self/maps >"$tmp/maps" 2>&1
check "installed sketchccl-run preloads the installed library" \
  grep -qF "$(readlink -f "$root$lib/libsketchccl.so.$version")" "$tmp/maps"

"$root$bin/sketchccl-run" --jax -- sh -c 'echo "$LD_LIBRARY_PATH"; echo "${LD_PRELOAD:-}"' >"$tmp/jax" 2>&1
check "installed sketchccl-run --jax puts the installed JAX shim first on LD_LIBRARY_PATH" \
  test "$(head -1 "$tmp/jax" | cut -d: -f1 | xargs readlink -f)" = "$(readlink -f "$root$lib/sketchccl/jax")"
check "... and preloads nothing" test -z "$(sed -n 2p "$tmp/jax")"

timeout 60 "$root$bin/sketchccl-perf" --nranks 2 -b 64K -e 64K -n 1 -w 0 --codec q8 \
  >"$tmp/perf" 2>&1
check "installed sketchccl-perf finds the installed library and runs" test $? -eq 0 || cat "$tmp/perf"

if [ -n "$pydir" ]; then
  # The installed package names the installed library (here under the destdir: redirected).
  pyout=$(cd "$tmp" && PYTHONPATH=$root$(abs "$pydir")/.. SKETCHCCL_LIBRARY=$root$lib/libsketchccl.so.$major \
    python3 -c 'import sketchccl, sketchccl._library as l; print(l.LIBRARY); print(sketchccl.version())' 2>&1)
  check "the installed Python package is bound to $lib/libsketchccl.so.$major" \
    test "$(head -1 <<<"$pyout")" = "$lib/libsketchccl.so.$major" || echo "$pyout"
  check "... and loads it (sketchccl.version() = $version)" test "$(sed -n 2p <<<"$pyout")" = "$version"
fi

echo "$fails failure(s)"
test "$fails" -eq 0
