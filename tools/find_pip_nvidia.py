"""Prints where the NVIDIA pip wheels of this Python keep nccl.h and cuda_runtime.h.

Used by meson.build for -Dnccl_home=python: one 'nccl=DIR' and one 'cuda=DIR' line, DIR being the
wheel folder holding include/ (site-packages/nvidia/nccl for PyTorch's NCCL wheel).
"""
import glob
import os
import sys


def wheel_dirs(header):
    found = []
    for entry in sys.path:
        if entry and os.path.isdir(os.path.join(entry, "nvidia")):
            for path in sorted(glob.glob(os.path.join(entry, "nvidia", "*", "include", header))):
                found.append(os.path.dirname(os.path.dirname(path)))
    return found


# The NCCL wheel's own folder first, should another wheel also carry a nccl.h.
nccl = sorted(wheel_dirs("nccl.h"), key=lambda d: os.path.basename(d) != "nccl")
if not nccl:
    sys.exit(f"no nvidia/*/include/nccl.h in the site-packages of {sys.executable} "
             "(pip install torch, or nvidia-nccl-cu12)")
print(f"nccl={nccl[0]}")
for cuda in wheel_dirs("cuda_runtime.h")[:1]:
    print(f"cuda={cuda}")
