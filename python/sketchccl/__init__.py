"""SketchCCL from Python: a communicator of the standalone library on host memory (ctypes),
and a PyTorch DDP communication hook (sketchccl.torch)."""
import ctypes

from . import _nccl
from ._nccl import SketchCCLError, library_path, load

__all__ = ["Communicator", "SketchCCLError", "get_unique_id", "library_path", "load", "version"]

# Element types by name, as the reductions take them.
DTYPES = {"float32": _nccl.FLOAT32, "float16": _nccl.FLOAT16, "bfloat16": _nccl.BFLOAT16}
OPS = {"sum": _nccl.SUM, "avg": _nccl.AVG}


def version():
    return load().sketchcclGetVersionString().decode()


def get_unique_id():
    """A new communicator id (128 bytes): one rank makes it, every rank passes it to
    Communicator."""
    lib = load()
    uid = _nccl.UniqueId()
    _nccl.check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), _nccl.NCCL_UNIQUE_ID_BYTES)  # NULs included


class Communicator:
    """`nranks` processes, this one `rank`, joined through the id that get_unique_id made on
    one of them. Reductions run on host memory and return when their result is in place."""

    def __init__(self, unique_id, nranks, rank):
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != \
                _nccl.NCCL_UNIQUE_ID_BYTES:
            raise ValueError("unique_id: the %d bytes of get_unique_id()" %
                             _nccl.NCCL_UNIQUE_ID_BYTES)
        if not 0 <= rank < nranks:
            raise ValueError("rank %d is not in [0, nranks=%d)" % (rank, nranks))
        self._lib = load()
        uid = _nccl.UniqueId()
        ctypes.memmove(ctypes.addressof(uid), bytes(unique_id), _nccl.NCCL_UNIQUE_ID_BYTES)
        handle = ctypes.c_void_p()
        _nccl.check(self._lib.ncclCommInitRank(ctypes.byref(handle), nranks, uid, rank),
                    "ncclCommInitRank")
        self._comm = handle
        self.nranks, self.rank = nranks, rank

    def _handle(self):
        if self._comm is None:
            raise SketchCCLError("the communicator was destroyed")
        return self._comm

    def all_reduce(self, sendbuf, recvbuf, count, dtype="float32", op="sum"):
        """AllReduce of `count` elements at address `sendbuf` into `recvbuf` (may be equal)."""
        comm = self._handle()
        _nccl.check(self._lib.ncclAllReduce(sendbuf, recvbuf, count, DTYPES[dtype], OPS[op],
                                            comm, None), "ncclAllReduce", comm)

    def reduce_scatter(self, sendbuf, recvbuf, recvcount, dtype="float32", op="sum"):
        """ReduceScatter: `recvcount * nranks` elements at `sendbuf`; this rank's reduced
        share (`recvcount`) into `recvbuf`."""
        comm = self._handle()
        _nccl.check(self._lib.ncclReduceScatter(sendbuf, recvbuf, recvcount, DTYPES[dtype],
                                                OPS[op], comm, None), "ncclReduceScatter", comm)

    def stats(self):
        """This rank's statistics (sketchcclCommGetStats): totals and one entry per codec."""
        s = _nccl.CommStats()
        s.size = ctypes.sizeof(s)
        comm = self._handle()
        _nccl.check(self._lib.sketchcclCommGetStats(comm, ctypes.byref(s)),
                    "sketchcclCommGetStats", comm)
        codecs = {}
        for i in range(s.num_codecs):
            c, a = s.codecs[i], s.accuracy[i]
            codecs[c.name.decode()] = {
                "calls": c.calls, "bytes_in": c.bytes_in, "bytes_sent": c.bytes_sent,
                "bytes_received": c.bytes_received, "seconds": c.seconds,
                "estimated_nmse_mean": a.estimated_nmse_mean,
                "estimated_nmse_worst": a.estimated_nmse_worst}
        return {"rank": s.rank, "nranks": s.nranks, "calls_taken": s.calls_taken,
                "calls_failed": s.calls_failed, "bytes_in": s.bytes_in,
                "bytes_sent": s.bytes_sent, "bytes_received": s.bytes_received,
                "seconds": s.seconds, "codecs": codecs}

    def destroy(self):
        if self._comm is not None:
            comm, self._comm = self._comm, None
            _nccl.check(self._lib.ncclCommDestroy(comm), "ncclCommDestroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
