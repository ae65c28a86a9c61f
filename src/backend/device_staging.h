// A device call staged on the caller's stream (docs/cuda.md, "The device path"): everything the
// GPU does for it is enqueued on the caller's stream before the call returns -- the input copied
// into pinned staging memory, a host flag written, a wait for the proxy's flag, the result copied
// back, a last flag written -- and the proxy runs the host engine on the staged copy without a
// single CUDA call. No other stream, no allocation and no CUDA call on the proxy: nothing the
// application does on other threads or streams can block the call, and nothing of the call can
// block theirs for longer than the call itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "src/backend/memory_pool.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// One staged call, shared by the caller's thread (which enqueues it) and the proxy (which runs
// it). Its three flags are words of its staging block: `ready` (the stream copied the input out),
// `done` (the proxy wrote the result), `back` (the stream copied the result back: the block is
// free again).
class StagedCall {
 public:
  // The staged copies: the input (in_bytes) and the result (out_bytes), 64-byte aligned host
  // memory the proxy reads and writes as it would a host call's buffers.
  uint8_t* in() const { return in_; }
  uint8_t* out() const { return out_; }
  size_t in_bytes() const { return in_bytes_; }
  size_t out_bytes() const { return out_bytes_; }
  // The value every flag of this use of the block is written to: never 0, distinct from the
  // block's previous use (its flags read 0 or an older value until written).
  uint32_t generation() const { return gen_; }

  // Proxy: returns once the stream has copied the input out; kRemoteError past timeout_s or once
  // *abort is true; the cancel's status when the stream operations could not be enqueued.
  Status wait_input(double timeout_s, const std::atomic<bool>* abort) const;
  // Proxy, however the call ended (done, failed, dropped by abort): lets the stream copy the result
  // back and go on. Idempotent; a plain host store.
  void release();
  // Whether the stream has copied the result back (the staging block may be reused).
  bool finished() const;
  // Whether `back` will never come (a stream operation after the input copy failed to enqueue).
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  // The stream operations could not all be enqueued: wait_input returns `why` from now on.
  void cancel(const Status& why);
  // Whether it was cancelled (its proxy work must not run: no rank's ring waits for it).
  bool cancelled() const { return is_cancelled_.load(std::memory_order_acquire); }

 private:
  friend class DeviceStager;
  uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  size_t in_bytes_ = 0;
  size_t out_bytes_ = 0;
  uint32_t* ready_ = nullptr;
  uint32_t* done_ = nullptr;
  uint32_t* back_ = nullptr;
  uint32_t gen_ = 0;  // the value every flag of this call is written to, never 0
  // A stream operation after the input copy could not be enqueued: `back` never comes, so the
  // block is never reused (the copy may still write it).
  std::atomic<bool> lost_{false};
  mutable std::mutex mu_;
  Status cancelled_;
  std::atomic<bool> is_cancelled_{false};
};

// A communicator's staging of device calls on `device`; every method runs on a caller's thread.
class DeviceStager {
 public:
  explicit DeviceStager(int device);
  // Waits (at most timeout_s in all) for the stream to copy back every staged call, then gives
  // their staging memory back to the process's pool; a block whose stream never got there is
  // abandoned (never reused).
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // Loads what the stream operations need on this device (device_runtime.h prepare); once.
  Status prepare();
  // A staging block for a call of `in_bytes` in and `out_bytes` out: a kept block of the
  // process's pinned staging pool, else a new one (allocated here, on the caller's thread);
  // kSystemError when there is no pinned memory. First gives back the blocks of every finished
  // call of the device, this stager's or another's (communicators used in turn share blocks).
  // `may_wait`: when the device's calls in flight hold more than staging_in_flight_bound() (or
  // twice this call's bytes), waits (at most SKETCHCCL_TIMEOUT) for them to finish first; false
  // inside a group's launch, whose earlier calls finish only after this one is enqueued.
  Status stage(size_t in_bytes, size_t out_bytes, std::shared_ptr<StagedCall>* out,
               bool may_wait = true);
  // Enqueues the call's stream operations on `stream`: copy `send` to in(), write ready, wait
  // done, copy out() to `recv`, write back. Call it after the proxy's work is queued (a launch may
  // block until the kernel it launches ends). On a failure before `ready` was enqueued the call is
  // cancelled (the proxy does not run it: c->cancelled()); after, the proxy runs it with the other
  // ranks and the error is the caller's (its result is not copied back).
  Status enqueue(void* stream, const void* send, void* recv, const std::shared_ptr<StagedCall>& c);
  // enqueue in two halves: the head (copy in, write ready; a failure cancels the call) and the
  // tail (wait done, copy back, write back; a failure loses the block). A group enqueues every
  // call's head before any tail (src/api/group.h).
  Status enqueue_head(void* stream, const void* send, const std::shared_ptr<StagedCall>& c);
  Status enqueue_tail(void* stream, void* recv, const std::shared_ptr<StagedCall>& c);
  // For a call that enqueues its own stream work between the two (the fused ring program,
  // src/coll/device_ring.h; its data live in in()): the first operation, `ready = g` (a failure
  // cancels the call, and the block is free again), and the last ones, wait `done == g` (the
  // proxy is done with the block: its last send has left) and `back = g`; lose() when an
  // operation between them could not be enqueued (`back` never comes: the block is never reused).
  Status enqueue_ready(void* stream, const std::shared_ptr<StagedCall>& c);
  Status enqueue_finish(void* stream, const std::shared_ptr<StagedCall>& c);
  static void lose(const std::shared_ptr<StagedCall>& c);
  // Pinned bytes of the staging blocks this stager's calls hold now.
  uint64_t pinned_bytes() const;
  // The calls whose result the stream has not yet copied back.
  size_t in_flight() const;
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }

 private:
  const int device_;
  double timeout_s_ = 300;
  mutable std::mutex mu_;
  bool prepared_ = false;
};

// The staging bytes a device's calls in flight may hold before the next call waits (stage):
// 1 GiB; a test may set another.
size_t staging_in_flight_bound();
void set_staging_in_flight_bound_for_test(size_t bytes);

// The process's pinned staging pool of `device` (memory_pool.h), made from the device runtime.
MemoryPool& staging_pool(int device);

}  // namespace sketchccl::backend
