// The CUDA backend's implementation (cuda_backend.h), private to src/backend/cuda/: the class
// and its buffers, with the methods defined by concern in cuda_backend.cc (lifetime, codec work,
// slots and waits), cuda_backend_memory.cc (the pinned arena, the pool, device buffers, copies
// between host and device) and cuda_backend_sums.cc (error feedback, the two-shot scheme's sums,
// the sparse helpers).
#pragma once

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cuda/codec_cuda.h"
#include "kernels/sparse.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/memory_pool.h"
#include "src/backend/packet_arena.h"

namespace sketchccl::backend::cuda_impl {

namespace kc = kernels::cuda;
using kernels::CodecParams;
using kernels::ElemType;

// The error of a failed CUDA call, named by `what`; clears a non-sticky error.
Status cuda_status(cudaError_t e, const char* what);

#define SCCL_CUDA_RETURN(expr, what)                               \
  do {                                                             \
    cudaError_t sccl_e_ = (expr);                                  \
    if (sccl_e_ != cudaSuccess) return cuda_status(sccl_e_, what); \
  } while (0)

// Device memory that grows, stream-ordered (cudaMallocFromPoolAsync/cudaFreeAsync on the
// backend's stream): unlike cudaMalloc/cudaFree these never synchronize the device, which matters
// because the caller's stream may be held by the stream gate while the proxy allocates. From the
// backend's own pool, never the device's default one: with the application on that pool
// (PyTorch's cudaMallocAsync allocator, CuPy), its internal dependencies could make a lane
// stream wait for an application stream the gate holds, and its release threshold of 0 gives the
// memory back at every synchronization of the application.
struct DevBuf {
  void* base = nullptr;
  uint8_t* p = nullptr;  // 256-aligned
  size_t cap = 0;
};

// Pinned host memory. Never freed before the backend is: cudaFreeHost may synchronize the
// device, and the caller's stream may be held by the stream gate.
struct PinBuf {
  uint8_t* p = nullptr;
  size_t cap = 0;
};

// The process's pool of pinned packet memory for `device` (memory_pool.h): the arenas of every
// CUDA backend on that device lease their blocks from it.
MemoryPool& pinned_packet_pool(int device);

// One encode, step or decode in flight: its completion event, the device's verdict and (decode)
// statistics, both copied into the slot's pinned bytes.
struct Slot {
  cudaEvent_t done = nullptr;
  uint64_t ticket = 0;     // 0: free
  int* verdict = nullptr;  // pinned: the device's verdict on the incoming packet
  bool check_verdict = false;
  kernels::DecodeStats* stats = nullptr;      // pinned, after the verdict
  kernels::DecodeStats* stats_dst = nullptr;  // decode: where test() puts them
};

// Slots, all made with the backend so that nothing is created while a gate holds a stream: one
// per possible slice lane for encode and step (SKETCHCCL_PIPELINE_DEPTH is at most 64), and as
// many for decodes, which therefore never take a lane's slot.
constexpr int kLaneSlots = 64;
// Streams for encodes and steps, each with its own device packet buffer and workspace: slot i
// runs on lane stream i % kLaneStreams, so one lane's copies overlap another's kernels instead
// of queueing behind them. Decodes and the synchronous calls run on the main stream.
constexpr int kLaneStreams = 4;
constexpr int kSlots = 2 * kLaneSlots;
constexpr size_t kSlotBytes = 64;                      // a slot's pinned verdict and statistics
constexpr size_t kStatsOffset = kSlots * kSlotBytes;   // synchronous decode's statistics
constexpr size_t kEfSumsOffset = kStatsOffset + 64;    // error feedback's sums of squares
constexpr size_t kVerdictOffset = kEfSumsOffset + 64;  // synchronous decode's verdict
constexpr size_t kSmallPinned = kVerdictOffset + 64;
// Largest arena block; an operation needing more gets plain memory for the rest (correct, but a
// copy to or from plain memory makes the proxy wait for the device's earlier work).
constexpr size_t kArenaCap = size_t(256) << 20;
constexpr size_t kArenaMinBlock = size_t(4) << 20;
// Pinned bounce buffer for copies to and from host memory that is not pinned (bitmaps, sparse
// values, s2's unresolved bits, packets beyond the arena): a copy from or to pageable memory may
// block the calling thread in the driver until the device reaches it, where neither
// SKETCHCCL_TIMEOUT nor ncclCommAbort can end the wait; through this buffer every wait polls.
constexpr size_t kBounceBytes = size_t(4) << 20;

// A stream with its own device packet buffer and workspace: work on it runs in stream order, so
// each slot's packet leaves the device before the next slot's arrives.
struct Lane {
  cudaStream_t stream = nullptr;
  DevBuf ws, pkt;
};

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int device)
      : dev_(device), arena_(pinned_packet_pool(device), kArenaMinBlock, kArenaCap) {}
  ~CudaBackendImpl() override;

  // On the caller's thread, before any stream is gated by this communicator.
  Status init();

  // Every codec, the sparse helpers and error feedback once (backend/warm_up.h): whatever kernel
  // the registry misses is loaded here too, on the caller's thread while no stream of this
  // communicator is held, so that no first launch loads a module under a held stream.
  Status warm_up();

  const char* name() const override { return "cuda"; }
  MemoryType memory_type() const override { return MemoryType::kDevice; }
  int device() const override { return dev_; }
  Status activate() override;
  void bound_waits(const std::atomic<bool>* abort, double timeout_s) override {
    abort_ = abort;
    timeout_s_ = timeout_s;
  }
  // Waits even after an abort (bounded: at most 10 s more), so that releasing the caller's
  // stream never lets it read a buffer a kernel still writes, unless the device hangs.
  Status quiesce() override;

  size_t packet_bytes(const CodecParams& p, size_t n) const override {
    return kernels::packet_bytes(p, n);
  }

  // encode / step: the asynchronous form, then a wait for it.
  Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt,
                size_t cap) override {
    uint64_t ticket = 0;
    SCCL_RETURN_IF_ERROR(encode_start(p, x, t, n, pkt, cap, &ticket));
    return wait(ticket);
  }
  Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
              size_t n, void* out, size_t cap) override {
    uint64_t ticket = 0;
    SCCL_RETURN_IF_ERROR(step_start(p, in, in_bytes, x, t, n, out, cap, &ticket));
    return wait(ticket);
  }

  // Queued on the backend's stream: the codec kernels into the device packet, the packet back
  // to `pkt`, an event. With `pkt` in the arena (pinned) nothing here waits for the device.
  Status encode_start(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt,
                      size_t cap, uint64_t* ticket) override;

  // The incoming packet goes to the device once; the fused step rewrites it in place there
  // (one kernel for the linear codecs, validating it too), and it comes back with the device's
  // verdict on it.
  Status step_start(const CodecParams& p, const void* in, size_t in_bytes, const void* x,
                    ElemType t, size_t n, void* out, size_t cap, uint64_t* ticket) override;

  Status test(uint64_t ticket, bool* done) override;

  void* alloc_packets(size_t bytes) override;
  void free_packets(void* p) override;
  // Makes the device's pool keep a block of the largest size ever asked for, which the proxy
  // leases when the call runs (packet_arena.h). Called on the caller's thread at every device
  // AllReduce, also while streams are gated: cudaHostAlloc on the caller's thread does not wait
  // for this backend's proxy, and the proxy never allocates pinned memory (docs/cuda.md).
  Status reserve_packet_memory(size_t bytes) override;
  void end_packet_reservation(bool ok) override { arena_.end_reservation(ok); }
  MemoryFigures memory_figures() const override;

  // Queued like a step: packet H2D, the decode kernel into `y`, statistics and verdict back into
  // the slot, an event (s2 too: its peeling rounds are all enqueued, none waits for the host). A
  // decode with every decode slot taken runs at once instead.
  Status decode_start(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t,
                      size_t n, float scale, kernels::DecodeStats* stats,
                      uint64_t* ticket) override;

  Status decode(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t, size_t n,
                float scale, kernels::DecodeStats* stats) override;

  // Error feedback on the device: the residual and scratch are device arrays; only the two
  // sums come back to the host.
  Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) override;
  Status ef_compensate(const void* x, ElemType t, size_t n, const float* residual,
                       float* out) override;
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override;
  // The two-shot scheme's fp32 sums on device arrays (alloc_f32), on the main stream, in the
  // host backend's order (kernels/host/sum_host.cc): the same bits.
  bool sums() const override { return true; }
  Status zero_f32(float* a, size_t n) override;
  Status load_sum(const void* x, ElemType t, size_t n, float* sum) override;
  // The contribution decoded at scale 1 into device scratch, then added: a decode's checks and
  // verdict as decode()'s.
  Status decode_add(const CodecParams& p, const void* pkt, size_t bytes, float* sum,
                    size_t n) override;
  Status store_sum(const float* sum, size_t n, float scale, void* y, ElemType t) override;

  // Gives back an alloc_f32 array's memory, stream-ordered, under this backend's device.
  void free_f32(void* base);

  // Bitmaps are host memory (they are the packets of the sparse codec's first phase).
  Status bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) override;
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    kernels::bitmap_or(acc, other, n);
    return Status::Ok();
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    *count = kernels::bitmap_popcount(bits, n);
    return Status::Ok();
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out,
                        size_t* count) override;
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        ElemType t, size_t* count) override;

  Status copy(void* dst, const void* src, size_t bytes) override;

 private:
  // Queues the decode of `pkt` into device memory `y`: the packet to the device, the decode
  // kernel, and its statistics into `stats_host` (pinned; none when null).
  Status queue_decode(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t,
                      size_t n, float scale, kernels::DecodeStats* stats_host,
                      uint64_t* unresolved_dev = nullptr);

  // What encode_start and step_start need first: an output of `cap` bytes big enough, device
  // workspace and packet buffer for (p, n), a free slot.
  // workspace and packet buffer for (p, n) on the slot's lane, a free slot. Work queued on the
  // main stream before (error feedback's compensation) is waited for by the lane stream.
  Status begin(const CodecParams& p, size_t n, size_t cap, Slot** sl, Lane** ln);
  // A free lane slot (encode, step): at most SKETCHCCL_PIPELINE_DEPTH are taken at a time.
  Status acquire(Slot** out, int* index);
  // A free decode slot, or null when all are taken (the decode then runs at once).
  Slot* acquire_decode();
  Slot* find(uint64_t ticket);
  Status finish(Slot* sl, cudaStream_t s, bool check_verdict, uint64_t* ticket);
  Status wait(uint64_t ticket);
  // A polling wait for `ev` (not cudaEventSynchronize): bounded by SKETCHCCL_TIMEOUT and ended by
  // the abort flag, like every other wait of the proxy: a dead peer or an abort must never hang it.
  Status wait_event(cudaEvent_t ev, const char* what);
  // Everything queued on `s` so far, waited for like wait_event.
  Status sync(cudaStream_t s, const char* what);
  Status pin(PinBuf* b, size_t bytes);

  // The backend's own memory pool (see DevBuf): no internal dependencies across streams, and
  // memory kept until the backend goes. Without memory pools (some vGPU and MIG setups) the device
  // path cannot be built, and the caller forwards.
  Status make_pool();

  // Whether [p, p+bytes) is pinned memory of this backend (the arena's blocks, the small and
  // bounce buffers): copies to and from it are queued without the host waiting.
  bool pinned(const void* p, size_t bytes);
  // Device -> host on `s`. Into pinned memory: queued, valid once `s` reaches it. Into other
  // memory: a chunk at a time through the bounce buffer, each chunk waited for with the bounded
  // poll, so the bytes are in place on return.
  Status to_host(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);
  // Host -> device on `s`. From pinned memory: queued (the source must stay until `s` reaches
  // it). From other memory: through the bounce buffer, each chunk waited for, so the source may
  // change on return.
  Status to_device(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);

  Status to_device_bits(const uint64_t* bits, size_t n);

  Status ensure(DevBuf& b, size_t bytes) { return ensure(b, bytes, stream_); }
  // Grows `b` stream-ordered on `stream`, the one stream that uses it.
  Status ensure(DevBuf& b, size_t bytes, cudaStream_t stream);
  Status ensure_ws(size_t bytes) { return ensure(ws_, bytes); }
  const int dev_;
  cudaStream_t stream_ = nullptr;  // main: decodes, error feedback, sparse, copies
  Lane lanes_[kLaneStreams];
  cudaEvent_t sync_ev_ = nullptr;  // sync()'s marker
  cudaEvent_t main_ev_ = nullptr;  // the main stream's work lanes must follow
  bool main_dirty_ = false;        // work queued on the main stream since main_ev_
  const std::atomic<bool>* abort_ = nullptr;
  double timeout_s_ = 300;
  DevBuf ws_, pkt_, stats_, bits_, vals_, ef_sums_, unres_;  // unres_: s2's unresolved bitmap
  DevBuf sum_tmp_;                                           // decode_add's decoded contribution
  PinBuf small_;                                             // slot verdicts and decode statistics
  PinBuf bounce_;  // copies to and from host memory that is not pinned (to_host, to_device)
  cudaMemPool_t pool_ = nullptr;  // every DevBuf and alloc_f32 array
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t next_ticket_ = 1;
  // The ring's packets: sized on the caller's thread, used on the proxy's (its own lock).
  PacketArena arena_;
};

}  // namespace sketchccl::backend::cuda_impl

#endif  // SKETCHCCL_HAVE_CUDA
