// The stream gate of the CUDA backend (docs/cuda.md): how a taken-over AllReduce on device
// buffers is ordered on the caller's stream without blocking the caller's thread.
//
//   caller's thread (ncclAllReduce)          caller's stream            proxy thread
//   enqueue(stream) -> ticket  ------------> [marker: host function] --> wait_marker(ticket)
//                                            [wait: flag >= seq]          ... the ring ...
//   returns at once                                 ^                     release(seq)
//                                                   +---- pinned flag <---+
//
// The marker is a cudaLaunchHostFunc that only signals the ticket (it makes no CUDA call); the
// wait is cuStreamWaitValue32(GEQ) on a word of mapped pinned memory where the driver supports
// stream memory operations, else a one-block kernel that polls that word. The proxy releases
// `seq` when the ring is done -- also when it failed or was aborted -- so no stream waits forever.
//
// No CUDA type appears here: the header is included by layers built without CUDA too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/status.h"

namespace sketchccl::backend {

// Set by the marker (the caller's stream reached the AllReduce), waited for by the proxy.
class GateMarker {
 public:
  void fire();
  // Ok once fired; kRemoteError past timeout_s or when *abort becomes true.
  Status wait(double timeout_s, const std::atomic<bool>* abort);
  bool fired() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
};

struct GateTicket {
  std::shared_ptr<GateMarker> marker;
  uint32_t seq = 0;
};

class StreamGate {
 public:
  enum class Mechanism { kAuto, kStreamWaitValue, kSpinKernel };

  // For `device` (the communicator's). Fails with kUnhandledCudaError without CUDA or device.
  static Status create(int device, Mechanism want, std::unique_ptr<StreamGate>* out);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Caller's thread: enqueues marker + wait on `stream` (a cudaStream_t; nullptr is the legacy
  // default stream of the communicator's device). The caller's current device is restored.
  // Callers serialize enqueue with the order in which the proxy runs the tickets.
  Status enqueue(void* stream, GateTicket* ticket);
  // Any thread: lets every wait for seq' <= seq (cyclically) through. Idempotent.
  void release(uint32_t seq);
  // Releases everything ever enqueued (abort, destruction).
  void release_all();

  // Whether some stream waits on this gate now (enqueued and not yet released).
  bool holding() const;
  // Whether any gate of this process holds a stream: then nothing may allocate pinned memory
  // (docs/cuda.md), since that may wait for the whole device.
  static bool any_holding();

  Mechanism mechanism() const { return mech_; }
  const char* mechanism_name() const;
  int device() const { return device_; }

 private:
  StreamGate() = default;
  int device_ = 0;
  Mechanism mech_ = Mechanism::kSpinKernel;
  int slot_ = -1;
  volatile uint32_t* flag_ = nullptr;  // mapped pinned word (host view)
  void* flag_dev_ = nullptr;           // its device address
  std::atomic<uint32_t> next_seq_{0};  // last sequence handed out
};

}  // namespace sketchccl::backend
