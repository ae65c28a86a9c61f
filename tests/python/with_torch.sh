#!/usr/bin/env bash
# Runs a Python test under the first Python that imports torch ($SKETCHCCL_TORCH_PYTHON, python3,
# /usr/bin/python3: Debian's python3-torch is only in the system Python), with the package of
# this build on PYTHONPATH; skipped (77) only where no Python here has torch.
#   with_torch.sh BUILD_PYTHON_DIR SCRIPT [ARGS...]
set -u
pkg=$1; shift
for py in ${SKETCHCCL_TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch.distributed' 2>/dev/null; then
    PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH} exec "$py" "$@"
  fi
done
echo "SKIP: no Python here imports torch (Debian: apt-get install python3-torch)"
exit 77
