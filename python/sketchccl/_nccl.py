"""ctypes bindings to the library's C API: nccl.h (standalone, host memory) and sketchccl.h."""
import ctypes
import os

from . import _library

NCCL_UNIQUE_ID_BYTES = 128
STATS_MAX_CODECS = 16

# nccl.h's enums (the values are NCCL's ABI).
SUCCESS, IN_PROGRESS = 0, 7
SUM, AVG = 0, 4
UINT8, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = 1, 6, 7, 8, 9


class SketchCCLError(RuntimeError):
    """A call into the library failed; the message is the library's own."""


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


class CodecStats(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("calls", ctypes.c_uint64),
                ("bytes_in", ctypes.c_uint64), ("bytes_sent", ctypes.c_uint64),
                ("bytes_received", ctypes.c_uint64), ("seconds", ctypes.c_double),
                ("s2_nonzeros", ctypes.c_uint64), ("s2_peeled", ctypes.c_uint64),
                ("s2_estimated", ctypes.c_uint64), ("ef_input_sq", ctypes.c_double),
                ("ef_residual_sq", ctypes.c_double)]


class CodecAccuracy(ctypes.Structure):
    _fields_ = [("estimated_calls", ctypes.c_uint64), ("estimated_nmse_mean", ctypes.c_double),
                ("estimated_nmse_worst", ctypes.c_double),
                ("estimated_maxrel_mean", ctypes.c_double),
                ("estimated_maxrel_worst", ctypes.c_double),
                ("sample_bytes_sent", ctypes.c_uint64), ("guard_steps", ctypes.c_uint64)]


class CommStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("rank", ctypes.c_int), ("nranks", ctypes.c_int),
                ("calls_taken", ctypes.c_uint64), ("calls_forwarded", ctypes.c_uint64),
                ("calls_failed", ctypes.c_uint64), ("bytes_in", ctypes.c_uint64),
                ("bytes_sent", ctypes.c_uint64), ("bytes_received", ctypes.c_uint64),
                ("seconds", ctypes.c_double), ("num_codecs", ctypes.c_int),
                ("codecs", CodecStats * STATS_MAX_CODECS),
                ("accuracy", CodecAccuracy * STATS_MAX_CODECS),
                ("s2_repaired", ctypes.c_uint64 * STATS_MAX_CODECS)]


_lib = None
_loaded_env = None


def library_path():
    """SKETCHCCL_LIBRARY if set, else the library this package was built or installed with."""
    return os.environ.get("SKETCHCCL_LIBRARY") or _library.LIBRARY


def load(env=None):
    """Loads the library once per process. The library reads its configuration (SKETCHCCL_*)
    from the environment once, at its first call: `env` is set before that; a later load that
    asks for other values raises, since they would not take effect."""
    global _lib, _loaded_env
    env = dict(env or {})
    if _lib is not None:
        differ = {k: v for k, v in env.items() if _loaded_env.get(k) != v}
        if differ:
            raise SketchCCLError(
                "the SketchCCL library is already loaded in this process with %s; it reads its "
                "configuration once, so %s cannot take effect (one configuration per process)"
                % (", ".join("%s=%s" % (k, _loaded_env.get(k)) for k in differ),
                   ", ".join("%s=%s" % kv for kv in differ.items())))
        return _lib
    os.environ.setdefault("SKETCHCCL_NCCL_LIB", "none")  # standalone: no real NCCL behind it
    os.environ.update(env)
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise SketchCCLError("cannot load the SketchCCL library %s: %s (set SKETCHCCL_LIBRARY "
                             "to libsketchccl.so)" % (path, e)) from None
    c_int, c_void_p, c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(c_void_p), c_int, UniqueId, c_int]
    lib.ncclCommDestroy.argtypes = [c_void_p]
    lib.ncclCommCount.argtypes = [c_void_p, ctypes.POINTER(c_int)]
    lib.ncclCommUserRank.argtypes = [c_void_p, ctypes.POINTER(c_int)]
    lib.ncclAllReduce.argtypes = [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p]
    lib.ncclReduceScatter.argtypes = [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p,
                                      c_void_p]
    lib.ncclGetErrorString.argtypes = [c_int]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [c_void_p]
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.sketchcclGetVersionString.restype = ctypes.c_char_p
    lib.sketchcclCommGetStats.argtypes = [c_void_p, ctypes.POINTER(CommStats)]
    for f in ("ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommCount",
              "ncclCommUserRank", "ncclAllReduce", "ncclReduceScatter", "sketchcclCommGetStats"):
        getattr(lib, f).restype = c_int
    _lib, _loaded_env = lib, {k: os.environ.get(k) for k in env}
    return lib


def check(rc, what, comm=None):
    if rc in (SUCCESS, IN_PROGRESS):
        return
    msg = (_lib.ncclGetLastError(comm) or b"").decode(errors="replace")
    name = _lib.ncclGetErrorString(rc).decode(errors="replace")
    raise SketchCCLError("%s failed: %s (%d)%s" % (what, name, rc, ": " + msg if msg else ""))
