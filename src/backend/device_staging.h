// A device call staged on the caller's stream (docs/cuda.md, "The device path"): everything the
// GPU does for it is enqueued on the caller's stream before the call returns -- the input copied
// into pinned staging memory chunk by chunk, each chunk's host flag written, then per chunk of the
// result a wait for the proxy's flag and the copy back, a last flag written -- and the proxy runs
// the host engine on the staged copy without a single CUDA call. No other stream, no allocation and
// no CUDA call on the proxy: nothing the application does on other threads or streams can block the
// call, and nothing of the call can block theirs for longer than the call itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "src/backend/memory_pool.h"
#include "src/backend/stage_gate.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// How a staged call's copies are cut (docs/cuda.md, "Chunks"): at most kMaxStagingChunks each
// way, so the flags fit the block's fixed header.
constexpr int kMaxStagingChunks = 16;
// The chunk size of a staged buffer of `bytes` with SKETCHCCL_STAGE_CHUNK_BYTES = `min_chunk`:
// `bytes` itself (one chunk) when min_chunk is 0 or the buffer is not larger; else the larger of
// min_chunk and bytes / kMaxStagingChunks, rounded up to 4 KiB (a whole number of elements of any
// type, 64-byte aligned).
size_t staging_chunk_bytes(size_t bytes, size_t min_chunk);
struct StagingChunks {
  size_t in_chunk = 0;   // bytes per chunk of the input (the last may be shorter); 0: one chunk
  size_t out_chunk = 0;  // of the result
  // The order in which the stream copies the input's chunks in and waits for and copies back
  // the result's (a permutation of the chunk indices); empty: ascending.
  std::vector<int> in_order, out_order;
};

// One staged call, shared by the caller's thread (which enqueues it) and the proxy (which runs
// it). Its flags are words of its staging block: `ready[k]` (the stream copied input chunk k
// out), `done[k]` (the proxy's result chunk k is final), `back` (the stream copied the whole
// result back: the block is free again).
class StagedCall final : public StageGate {
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

  int in_chunks() const { return in_n_; }
  int out_chunks() const { return out_n_; }

  // Proxy: returns once the caller's thread has enqueued the input's copies and flags (the head);
  // kRemoteError past timeout_s or once *abort is true; the cancel's status when the stream
  // operations could not be enqueued (then the call must not run).
  Status wait_started(double timeout_s, const std::atomic<bool>* abort) const;
  // Proxy: returns once the stream has copied the whole input out (wait_started, then every
  // chunk's flag); errors as wait_started's.
  Status wait_input(double timeout_s, const std::atomic<bool>* abort);
  // Proxy: the bounds of need_input's waits (SKETCHCCL_TIMEOUT per wait, the abort flag).
  void bound_waits(double timeout_s, const std::atomic<bool>* abort);
  // StageGate, on the proxy: polls the chunks' `ready` flags; writes a chunk's `done` once every
  // byte of it is final.
  Status need_input(size_t begin, size_t end) override;
  void output_final(size_t begin, size_t end) override;
  // Proxy, however the call ended (done, failed, dropped by abort): lets the stream copy every
  // chunk of the result back and go on. Idempotent; plain host stores.
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
  // Polls until `ready` answers true; kRemoteError past timeout_s ("`late` within ...`why`") or
  // on *abort; the cancel's status once cancelled.
  template <class Ready>
  Status poll(Ready ready, double timeout_s, const std::atomic<bool>* abort, const char* late,
              const char* why) const;
  size_t in_len(int k) const;
  size_t out_len(int k) const;

  uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  size_t in_bytes_ = 0;
  size_t out_bytes_ = 0;
  int in_n_ = 1, out_n_ = 1;               // chunks each way, 1 .. kMaxStagingChunks
  size_t in_chunk_ = 0, out_chunk_ = 0;    // bytes per chunk (the last may be shorter)
  int in_order_[kMaxStagingChunks] = {};   // the stream's order of the input's chunks
  int out_order_[kMaxStagingChunks] = {};  // and of the result's
  uint32_t* ready_[kMaxStagingChunks] = {};
  uint32_t* done_[kMaxStagingChunks] = {};
  uint32_t* back_ = nullptr;
  uint32_t gen_ = 0;  // the value every flag of this call is written to, never 0
  // The head (every input copy and flag) is enqueued: the proxy may run the call.
  std::atomic<bool> started_{false};
  // The proxy's own: the input chunks seen ready, the final bytes of each result chunk, the
  // bounds of need_input's waits.
  uint32_t seen_ = 0;
  size_t final_[kMaxStagingChunks] = {};
  double timeout_s_ = 300;
  const std::atomic<bool>* abort_ = nullptr;
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
  // A staging block for a call of `in_bytes` in and `out_bytes` out, cut as `chunks` says: a kept
  // block of the process's pinned staging pool, else a new one (allocated here, on the caller's
  // thread); kSystemError when there is no pinned memory. First gives back the blocks of every
  // finished call of the device, this stager's or another's (communicators used in turn share
  // blocks). `may_wait`: when the device's calls in flight hold more than staging_in_flight_bound()
  // (or twice this call's bytes), waits (at most SKETCHCCL_TIMEOUT) for them to finish first; false
  // inside a group's launch, whose earlier calls finish only after this one is enqueued.
  Status stage(size_t in_bytes, size_t out_bytes, std::shared_ptr<StagedCall>* out,
               bool may_wait = true, const StagingChunks& chunks = {});
  // Enqueues the call's stream operations on `stream`: per input chunk (in order) copy `send` to
  // in() and write its ready; per result chunk (in order) wait its done and copy out() to
  // `recv`; write back. Call it after the proxy's work is queued (a launch may block until the
  // kernel it launches ends). On a failure in the head the call is cancelled (the proxy does not
  // run it: c->cancelled()); after, the proxy runs it with the other ranks and the error is the
  // caller's (its result is not copied back).
  Status enqueue(void* stream, const void* send, void* recv, const std::shared_ptr<StagedCall>& c);
  // enqueue in two halves: the head (the copies in and ready flags; a failure cancels the call)
  // and the tail (the waits, copies back and back; a failure loses the block). A group enqueues
  // every call's head before any tail (src/api/group.h).
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
