// The stream gate (docs/cuda.md): how an operation on memory with its own streams is ordered on
// the caller's stream without blocking the caller's thread. The caller enqueues a ticket on its
// stream; the proxy waits for the ticket's marker (the stream reached the operation), runs it,
// and releases the ticket -- also when it failed or was aborted -- so no stream waits forever.
//
// This is the interface coll sees; the CUDA gate (src/backend/cuda/stream_gate.h) implements it.
// Host memory has no streams and no gate.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "src/backend/memory_type.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// Set by the marker (the caller's stream reached the operation), waited for by the proxy.
class GateMarker {
 public:
  void fire();
  // The marker or the wait could not be enqueued: the stream is not held, so the operation must
  // not run; wait() returns `why` whether or not the marker fires later.
  void cancel(const Status& why);
  // Ok once fired; kRemoteError past timeout_s or when *abort becomes true; the cancel's status.
  Status wait(double timeout_s, const std::atomic<bool>* abort);
  bool fired() const;
  bool cancelled() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
  Status cancelled_;
};

struct GateTicket {
  std::shared_ptr<GateMarker> marker;
  uint32_t seq = 0;
};

class StreamGate {
 public:
  virtual ~StreamGate() = default;
  // Caller's thread, in two steps around queueing the operation on the proxy: reserve takes the
  // next sequence number and a marker and touches no device; enqueue then puts the marker and the
  // wait on `stream` (the memory type's stream handle; nullptr is its default stream). The
  // operation is queued in between, because a launch may not return until its kernel ends
  // (CUDA_LAUNCH_BLOCKING, compute-sanitizer): the wait must be releasable before it is launched.
  // A failed enqueue cancels the ticket's marker and releases its sequence number. Callers
  // serialize reserve..enqueue with the order in which the proxy runs the tickets.
  virtual void reserve(GateTicket* ticket) = 0;
  virtual Status enqueue(void* stream, const GateTicket& ticket) = 0;
  // Any thread: lets every wait for seq' <= seq (cyclically) through. Idempotent.
  virtual void release(uint32_t seq) = 0;
  // Releases everything ever enqueued (abort, destruction).
  virtual void release_all() = 0;
  // Whether some stream waits on this gate now (enqueued and not yet released).
  virtual bool holding() const = 0;
};

// The gate for streams of `mem` memory on `device`: kDevice, the device runtime's (the CUDA gate,
// kUnhandledCudaError without CUDA or the device; device_runtime.h); kHost, kInvalidUsage (host
// memory has no streams).
Status make_stream_gate(MemoryType mem, int device, std::unique_ptr<StreamGate>* out);

// Whether any gate of this process holds a stream now: then nothing may allocate pinned memory
// (docs/cuda.md), since that may wait for the whole device.
bool any_stream_gate_holding();

}  // namespace sketchccl::backend
