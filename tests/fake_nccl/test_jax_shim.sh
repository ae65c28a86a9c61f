#!/usr/bin/env bash
# The JAX/XLA shim (build/jax/libnccl.so.2) in front of the fake NCCL: a program that dlopens
# "libnccl.so.2" and calls through dlsym on that handle reaches SketchCCL first, and SketchCCL
# forwards to the next libnccl.so.2 on LD_LIBRARY_PATH (the fake), skipping itself. Also through
# `sketchccl-run --jax`, and, as a control, without the shim's folder (then the fake answers).
#   test_jax_shim.sh CLIENT JAX_DIR FAKE_DIR SKETCHCCL_RUN
set -u
client=$1 jax_dir=$2 fake_dir=$3 run=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); return 1; fi
}
unset $(env | grep -o '^SKETCHCCL_[A-Z0-9_]*') LD_PRELOAD 2>/dev/null || true
export SKETCHCCL_DEBUG=INFO SKETCHCCL_TIMEOUT=30

scenario() { # name, command...: runs it with the fake's call log in $tmp/NAME.log
  local name=$1; shift
  FAKE_NCCL_LOG=$tmp/$name.log "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  echo "--- $name (exit $rc)"; cat "$tmp/$name.out"
  return $rc
}
shim_checks() { # name
  local n=$1 out=$tmp/$1.out
  local opened
  opened=$(sed -n 's/^opened //p' "$out")
  check "$n: dlopen(\"libnccl.so.2\") opens the shim ($opened)" \
    test "$(readlink -f "$opened")" = "$(readlink -f "$jax_dir/libnccl.so.2")"
  check "$n: the handle is SketchCCL" grep -q "^is_sketchccl 1$" "$out"
  check "$n: ncclAllReduce on the handle is SketchCCL's" grep -q "^allreduce_in .*jax/libnccl.so.2$" "$out"
  check "$n: init, AllReduce and destroy succeed" \
    test "$(grep -cE '^(init|allreduce|destroy) 0$' "$out")" = 3
  check "$n: SketchCCL counted the AllReduce as forwarded" grep -q "^stats 0 forwarded [1-9]" "$out"
  check "$n: the fake NCCL received it" grep -q "^ncclAllReduce .* count=16 " "$tmp/$n.log" ||
    cat "$tmp/$n.log" "$tmp/$n.err"
  if grep -q "^device_api " "$out"; then
    check "$n: the shim exports the 11 device-API host functions" \
      test "$(grep -c "^device_api .* in .*jax/libnccl.so.2$" "$out")" = 11
    check "$n: ncclLLA2ACalcSlots reached the fake through the shim" \
      grep -q "^ncclLLA2ACalcSlots maxElts=6 maxEltSize=8$" "$tmp/$n.log"
    check "$n: and its answer came back unchanged" grep -q "^lla2a_slots 53$" "$out"
  fi
  check "$n: SketchCCL skipped itself and forwards to the fake" \
    grep -q "forwarding to .*$(basename "$fake_dir")/libnccl.so.2" "$tmp/$n.err" ||
    cat "$tmp/$n.err"
}

LD_LIBRARY_PATH=$jax_dir:$fake_dir scenario path "$client"
check "LD_LIBRARY_PATH=jax:fake: the client exits 0" test $? -eq 0
shim_checks path

LD_LIBRARY_PATH=$fake_dir scenario run "$run" --jax -- "$client"
check "sketchccl-run --jax: the client exits 0" test $? -eq 0
shim_checks run

LD_LIBRARY_PATH=$fake_dir scenario control "$client"
check "control without the shim's folder: exits 0" test $? -eq 0
check "control: the handle is the fake, not SketchCCL" grep -q "^is_sketchccl 0$" "$tmp/control.out"
check "control: the fake received the AllReduce" grep -q "^ncclAllReduce .* count=16 " "$tmp/control.log"
echo "$fails failure(s)"
test "$fails" -eq 0
