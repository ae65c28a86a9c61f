"""PyTorch glue: reductions of CPU tensors through a SketchCCL communicator, and a DDP
communication hook.

    state, hook = sketchccl.torch.comm_hook(codec="q8", error_feedback=False)
    model.register_comm_hook(state, hook)

Each gradient bucket is averaged over the process group's ranks by SketchCCL's AllReduce (the
codec compresses it on the wire) instead of the process group's own. The calls run on one
thread of the hook's, in the order DDP issues them (the same on every rank), so they overlap the
rest of the backward pass as the process group's asynchronous AllReduce does.
"""
import queue
import threading

import torch
import torch.distributed as dist

from . import Communicator, SketchCCLError, get_unique_id, load

__all__ = ["HookState", "all_reduce", "comm_hook", "communicator", "reduce_scatter"]

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _checked(tensor, what):
    """The tensor's element type name; raises on what the library cannot reduce in place."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: a torch.Tensor, not %s" % (what, type(tensor).__name__))
    if tensor.dtype not in _DTYPES:
        raise TypeError("%s: SketchCCL reduces float32, float16 and bfloat16 tensors, not %s"
                        % (what, tensor.dtype))
    if tensor.device.type != "cpu":
        raise ValueError("%s: a CPU tensor (host memory), not one on %s" % (what, tensor.device))
    if not tensor.is_contiguous():
        raise ValueError("%s: a contiguous tensor (its memory is reduced in place); call "
                         ".contiguous() first" % what)
    return _DTYPES[tensor.dtype]


def all_reduce(comm, tensor, op="sum"):
    """In-place AllReduce of a contiguous float CPU tensor ("sum" or "avg")."""
    dtype = _checked(tensor, "all_reduce")
    comm.all_reduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dtype, op)
    return tensor


def reduce_scatter(comm, input, output, op="sum"):
    """ReduceScatter: `input` holds nranks * output.numel() elements; this rank's reduced share
    goes to `output` (same element type)."""
    dtype = _checked(input, "reduce_scatter input")
    if _checked(output, "reduce_scatter output") != dtype:
        raise TypeError("reduce_scatter: input %s and output %s differ" % (input.dtype,
                                                                          output.dtype))
    if input.numel() != output.numel() * comm.nranks:
        raise ValueError("reduce_scatter: input has %d elements, not nranks (%d) x output's %d"
                         % (input.numel(), comm.nranks, output.numel()))
    comm.reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), dtype, op)
    return output


def communicator(group=None):
    """A SketchCCL communicator over the ranks of a torch.distributed process group: rank 0
    of the group makes the id, the group broadcasts it. Collective: every rank calls it."""
    if not dist.is_initialized():
        raise RuntimeError("sketchccl.torch.communicator: torch.distributed is not initialized "
                           "(call dist.init_process_group first)")
    group = group or dist.group.WORLD
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    uid = torch.zeros(128, dtype=torch.uint8)
    if rank == 0:
        uid.copy_(torch.frombuffer(bytearray(get_unique_id()), dtype=torch.uint8))
    dist.broadcast(uid, src=dist.get_global_rank(group, 0) if group is not dist.group.WORLD
                   else 0, group=group)
    return Communicator(bytes(uid.tolist()), size, rank)


class HookState:
    """What the hook needs: the communicator and the thread that runs its calls."""

    def __init__(self, comm, group=None):
        size = dist.get_world_size(group or dist.group.WORLD)
        if comm.nranks != size:
            raise ValueError("sketchccl.torch: the communicator has %d ranks, the process group "
                             "%d; DDP averages over the group" % (comm.nranks, size))
        self.comm = comm
        self.buckets = 0
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sketchccl-hook", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            tensor, fut = item
            try:
                all_reduce(self.comm, tensor, "avg")
            except Exception as e:  # handed to the waiting training step
                fut.set_exception(e)
            else:
                fut.set_result(tensor)

    def submit(self, tensor):
        """Averages `tensor` in place on the hook's thread; a Future of it."""
        _checked(tensor, "DDP gradient bucket")  # raised here, in the caller's thread
        if not self._thread.is_alive():
            raise SketchCCLError("sketchccl.torch: the hook was closed")
        fut = torch.futures.Future()
        self._queue.put((tensor, fut))
        self.buckets += 1
        return fut

    def stats(self):
        return self.comm.stats()

    def close(self):
        """Stops the thread (after the calls queued) and destroys the communicator."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.comm.destroy()


def _hook(state, bucket):
    return state.submit(bucket.buffer())


def comm_hook(codec="auto", error_feedback=False, group=None, comm=None, env=None):
    """(state, hook) for DistributedDataParallel.register_comm_hook: every gradient bucket
    averaged by SketchCCL with `codec` (a SKETCHCCL_CODEC value: none, bf16, q8, q4, auto, ...),
    with error feedback or not. The library reads its configuration once per process, so a
    process uses one codec; `env` adds other SKETCHCCL_* settings. Collective unless `comm`
    (a Communicator over the group's ranks) is given."""
    settings = {"SKETCHCCL_CODEC": str(codec),
                "SKETCHCCL_ERROR_FEEDBACK": "1" if error_feedback else "0"}
    settings.update(env or {})
    load(settings)
    return HookState(comm if comm is not None else communicator(group), group), _hook
