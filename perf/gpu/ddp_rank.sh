#!/usr/bin/env bash
# perf/gpu/ddp_rank.sh COMMAND [ARG...] -- one torchrun worker, with its own per-rank environment.
#
# torchrun gives every worker the same environment plus RANK, LOCAL_RANK and WORLD_SIZE; ranks
# that share one GPU must differ in NCCL_HOSTID (NCCL refuses two ranks of one host on one GPU)
# and, for SketchCCL's nodes, in SKETCHCCL_HOSTID. So torchrun runs this (--no-python bash), which
# sets, for every word VAR=v0,v1,... of DDP_RANK_ENV, VAR to the value of index RANK, sets
# LD_PRELOAD to DDP_PRELOAD when that is set (only the workers load SketchCCL, not torchrun),
# and then runs COMMAND. perf/gpu/torch_ddp_check.py builds both variables.
set -euo pipefail
r=${RANK:?ddp_rank.sh: RANK is not set (run under torchrun)}
for spec in ${DDP_RANK_ENV:-}; do
  var=${spec%%=*}
  IFS=, read -ra vals <<<"${spec#*=}"
  if [ "$r" -ge "${#vals[@]}" ]; then
    echo "ddp_rank.sh: $var has ${#vals[@]} values, none for rank $r" >&2
    exit 2
  fi
  export "$var=${vals[$r]}"
done
if [ -n "${DDP_PRELOAD:-}" ]; then
  export LD_PRELOAD="$DDP_PRELOAD"
fi
exec "$@"
