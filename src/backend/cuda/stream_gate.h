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
// wait is a one-block kernel that polls a word of mapped pinned memory (kAuto, the default: an
// ordinary kernel, visible to CUDA's scheduler), or cuStreamWaitValue32(GEQ) on that word when
// asked for (kStreamWaitValue). Creating a gate first loads every registered kernel
// (kernel_preload.h), before this gate can hold a stream. The proxy releases
// `seq` when the ring is done -- also when it failed or was aborted -- so no stream waits forever.
//
// coll reaches it through src/backend/stream_gate.h (make_stream_gate); this header is for
// src/backend and the GPU tests. No CUDA type appears here: it builds without CUDA too.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "src/backend/stream_gate.h"
#include "src/core/status.h"

namespace sketchccl::backend {

class CudaStreamGate final : public StreamGate {
 public:
  // kAuto: the spin kernel, which CUDA's scheduler sees (a stream memory wait it does not);
  // kStreamWaitValue fails where unsupported.
  enum class Mechanism { kAuto, kStreamWaitValue, kSpinKernel };

  // For `device` (the communicator's). Fails with kUnhandledCudaError without CUDA or device.
  static Status create(int device, Mechanism want, std::unique_ptr<CudaStreamGate>* out);
  ~CudaStreamGate() override;
  CudaStreamGate(const CudaStreamGate&) = delete;
  CudaStreamGate& operator=(const CudaStreamGate&) = delete;

  // Caller's thread, reserve then enqueue around queueing the operation (stream_gate.h): enqueue
  // puts marker + wait on `stream` (a cudaStream_t; nullptr is the legacy default stream of the
  // communicator's device). The caller's current device is restored.
  void reserve(GateTicket* ticket) override;
  Status enqueue(void* stream, const GateTicket& ticket) override;
  // Any thread: lets every wait for seq' <= seq (cyclically) through. Idempotent.
  void release(uint32_t seq) override;
  // Releases everything ever enqueued (abort, destruction).
  void release_all() override;

  // Whether some stream waits on this gate now (enqueued and not yet released).
  bool holding() const override;
  // Whether any gate of this process holds a stream: then nothing may allocate pinned memory
  // (docs/cuda.md), since that may wait for the whole device.
  static bool any_holding();

  Mechanism mechanism() const { return mech_; }
  const char* mechanism_name() const;
  int device() const { return device_; }

 private:
  CudaStreamGate() = default;
  int device_ = 0;
  Mechanism mech_ = Mechanism::kSpinKernel;
  int slot_ = -1;
  volatile uint32_t* flag_ = nullptr;  // mapped pinned word (host view)
  void* flag_dev_ = nullptr;           // its device address
  std::atomic<uint32_t> next_seq_{0};  // last sequence handed out
};

}  // namespace sketchccl::backend
