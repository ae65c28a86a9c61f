#!/usr/bin/env bash
# The soak: runs of 2-8 standalone ranks with random sizes (0 to 8 MiB), codecs, types, ops,
# in/out-of-place calls, groups and splits, a rank killed in every fourth run; reports crashes,
# hangs and cross-rank mismatches (goal 0/0/0) and exits non-zero unless all are zero.
#
#   tests/soak/soak.sh [BUILD_DIR] [sketchccl-soak options]
#     --calls N (10000)  --seconds S  --seed N ($SKETCHCCL_SOAK_SEED, else random)
#     --max-ranks P (8)  --kill-every K (4)  --timeout S (SKETCHCCL_TIMEOUT of the ranks, 20)
# The 30-second version is the Meson test `soak` (suite soak): --seconds 30 with a fixed seed.
set -euo pipefail
BUILD=${1:-build}
[ $# -gt 0 ] && shift
SOAK="$BUILD/tests/soak/sketchccl-soak"
if [ ! -x "$SOAK" ]; then
  echo "soak.sh: $SOAK not found: build first (./run build)" >&2
  exit 2
fi
SEED=${SKETCHCCL_SOAK_SEED:-$(( (RANDOM << 15) | RANDOM ))}
unset SKETCHCCL_SOAK_SEED  # the script's own: the library warns of SKETCHCCL_ names it does not know
export SKETCHCCL_NCCL_LIB=none
exec "$SOAK" --seed "$SEED" "$@"
