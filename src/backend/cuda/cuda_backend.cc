#include "src/backend/cuda/cuda_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "src/backend/cuda/kernel_preload.h"
#include "src/backend/warm_up.h"

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/codec_cuda.h"
#include "kernels/sparse.h"
#endif

namespace sketchccl::backend {

#if SKETCHCCL_HAVE_CUDA
namespace {

namespace kc = kernels::cuda;
using kernels::CodecParams;
using kernels::ElemType;

Status cuda_status(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return errorf(Code::kUnhandledCudaError, "CUDA backend: %s: %s", what, cudaGetErrorString(e));
}

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

// Pinned memory for the ring's packets (Backend::alloc_packets): one block, bump-allocated during
// an operation and rewound when the operation has handed everything back. It grows on the
// caller's thread (reserve_packet_memory) to the largest size ever asked for, whether or not a
// stream is gated (under DDP one always is: bucket N+1 arrives while bucket N holds the stream);
// the proxy thread never allocates pinned memory. A block that is replaced stays valid (retired)
// until the backend goes: packets may still live in it.
struct Arena {
  PinBuf block;
  size_t top = 0;
  int live = 0;
};

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

// Makes the calling thread's stream-capture mode relaxed, once per thread: a graph another thread
// of the application captures in global mode is then not invalidated by this thread's
// cudaEventQuery, pageable copies or cudaMallocAsync, which global mode forbids during a capture.
void relax_capture_mode_once() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) cudaGetLastError();
}

// Devices this process warmed up: modules load once per device and process, so later
// communicators' backends on the same device skip the warm-up's round trips.
std::mutex g_warm_mu;
std::vector<int> g_warmed;
bool warmed_up(int device) {
  std::lock_guard<std::mutex> lock(g_warm_mu);
  return std::find(g_warmed.begin(), g_warmed.end(), device) != g_warmed.end();
}
void mark_warmed_up(int device) {
  std::lock_guard<std::mutex> lock(g_warm_mu);
  if (std::find(g_warmed.begin(), g_warmed.end(), device) == g_warmed.end()) {
    g_warmed.push_back(device);
  }
}

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int device) : dev_(device) {}
  ~CudaBackendImpl() override {
    if (stream_ == nullptr) return;
    // Possibly on the application's thread (the last owner of the communicator): its current
    // device is put back afterwards.
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    if (cudaSetDevice(dev_) != cudaSuccess) {  // e.g. at exit, after the runtime unloaded
      cudaGetLastError();
      return;
    }
    for (DevBuf* b : {&ws_, &pkt_, &stats_, &bits_, &vals_, &ef_sums_, &unres_, &sum_tmp_}) {
      if (b->base != nullptr) cudaFreeAsync(b->base, stream_);
    }
    for (Lane& l : lanes_) {
      if (l.stream == nullptr) continue;
      for (DevBuf* b : {&l.ws, &l.pkt}) {
        if (b->base != nullptr) cudaFreeAsync(b->base, l.stream);
      }
    }
    // Bounded: a device that never finishes must not hang the application's teardown.
    abort_ = nullptr;
    timeout_s_ = std::min(timeout_s_, 10.0);
    for (Lane& l : lanes_) {
      if (l.stream == nullptr) continue;
      (void)sync(l.stream, "backend teardown");
      cudaStreamDestroy(l.stream);
    }
    (void)sync(stream_, "backend teardown");
    if (sync_ev_ != nullptr) cudaEventDestroy(sync_ev_);
    if (main_ev_ != nullptr) cudaEventDestroy(main_ev_);
    cudaStreamDestroy(stream_);
    if (pool_ != nullptr) cudaMemPoolDestroy(pool_);  // released once its frees completed
    for (PinBuf* b : {&small_, &bounce_, &arena_.block}) {
      if (b->p != nullptr) old_pinned_.push_back(b->p);
    }
    for (const PinBuf& r : retired_)
      old_pinned_.push_back(r.p);
    for (auto& sl : slots_) {
      if (sl->done != nullptr) cudaEventDestroy(sl->done);
    }
    for (void* p : old_pinned_)
      cudaFreeHost(p);
    if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
    cudaGetLastError();
  }

  // On the caller's thread, before any stream is gated by this communicator.
  Status init() {
    SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
    // Every kernel loaded and the stack sized now, not at a first launch under a held stream.
    SCCL_RETURN_IF_ERROR(preload_kernels(dev_));
    // The highest priority: during backward the codec's small kernels must not queue behind the
    // application's GEMMs. Non-blocking: never ordered after the legacy stream.
    int least = 0, greatest = 0;
    SCCL_CUDA_RETURN(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                     "cudaDeviceGetStreamPriorityRange");
    SCCL_CUDA_RETURN(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest),
                     "cudaStreamCreateWithPriority");
    for (Lane& l : lanes_) {
      SCCL_CUDA_RETURN(cudaStreamCreateWithPriority(&l.stream, cudaStreamNonBlocking, greatest),
                       "cudaStreamCreateWithPriority");
    }
    SCCL_CUDA_RETURN(cudaEventCreateWithFlags(&sync_ev_, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
    SCCL_CUDA_RETURN(cudaEventCreateWithFlags(&main_ev_, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
    SCCL_RETURN_IF_ERROR(make_pool());
    SCCL_RETURN_IF_ERROR(pin(&small_, kSmallPinned));
    SCCL_RETURN_IF_ERROR(pin(&bounce_, kBounceBytes));
    for (int i = 0; i < kSlots; ++i) {
      auto sl = std::make_unique<Slot>();
      SCCL_CUDA_RETURN(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags");
      sl->verdict = reinterpret_cast<int*>(small_.p + kSlotBytes * i);
      sl->stats = reinterpret_cast<kernels::DecodeStats*>(small_.p + kSlotBytes * i + 8);
      slots_.push_back(std::move(sl));
    }
    if (warmed_up(dev_)) return Status::Ok();
    SCCL_RETURN_IF_ERROR(warm_up());
    mark_warmed_up(dev_);
    return Status::Ok();
  }

  // Every codec, the sparse helpers and error feedback once (backend/warm_up.h): whatever kernel
  // the registry misses is loaded here too, on the caller's thread while no stream of this
  // communicator is held, so that no first launch loads a module under a held stream.
  Status warm_up() {
    std::unique_ptr<F32Array> x, y;
    SCCL_RETURN_IF_ERROR(alloc_f32(kWarmUpElems, &x));
    SCCL_RETURN_IF_ERROR(alloc_f32(kWarmUpElems, &y));
    // Finite non-zero values in every element type (bytes 0x3c: about 0.0115 or 1.06).
    SCCL_CUDA_RETURN(cudaMemsetAsync(x->data(), 0x3c, kWarmUpElems * sizeof(float), stream_),
                     "warm-up input");
    SCCL_RETURN_IF_ERROR(warm_up_backend(*this, x->data(), y->data()));
    return sync(stream_, "warm-up");
  }

  const char* name() const override { return "cuda"; }
  MemoryType memory_type() const override { return MemoryType::kDevice; }
  int device() const override { return dev_; }
  Status activate() override {
    relax_capture_mode_once();
    SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
    return Status::Ok();
  }
  void bound_waits(const std::atomic<bool>* abort, double timeout_s) override {
    abort_ = abort;
    timeout_s_ = timeout_s;
  }
  // Waits even after an abort (bounded: at most 10 s more), so that releasing the caller's
  // stream never lets it read a buffer a kernel still writes, unless the device hangs.
  Status quiesce() override {
    const std::atomic<bool>* abort = abort_;
    const double timeout = timeout_s_;
    abort_ = nullptr;
    timeout_s_ = std::min(timeout, 10.0);
    Status st = Status::Ok();
    for (Lane& l : lanes_) {
      if (st.ok()) st = sync(l.stream, "codec work still running after a failure");
    }
    if (st.ok()) st = sync(stream_, "codec work still running after a failure");
    abort_ = abort;
    timeout_s_ = timeout;
    return st;
  }

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
                      size_t cap, uint64_t* ticket) override {
    *ticket = 0;
    const size_t need = kernels::packet_bytes(p, n);
    Slot* sl = nullptr;
    Lane* ln = nullptr;
    SCCL_RETURN_IF_ERROR(begin(p, n, cap, &sl, &ln));
    SCCL_RETURN_IF_ERROR(kc::encode(p, x, t, n, ln->pkt.p, need, ln->ws.p, ln->ws.cap, ln->stream));
    SCCL_RETURN_IF_ERROR(to_host(pkt, ln->pkt.p, need, ln->stream, "packet to host"));
    return finish(sl, ln->stream, false, ticket);
  }

  // The incoming packet goes to the device once; the fused step rewrites it in place there
  // (one kernel for the linear codecs, validating it too), and it comes back with the device's
  // verdict on it.
  Status step_start(const CodecParams& p, const void* in, size_t in_bytes, const void* x,
                    ElemType t, size_t n, void* out, size_t cap, uint64_t* ticket) override {
    *ticket = 0;
    const size_t need = kernels::packet_bytes(p, n);
    if (in_bytes < need) {
      return errorf(Code::kInvalidArgument, "codec %s: truncated packet (%zu bytes, expected %zu)",
                    kernels::codec_name(p.codec), in_bytes, need);
    }
    Slot* sl = nullptr;
    Lane* ln = nullptr;
    SCCL_RETURN_IF_ERROR(begin(p, n, cap, &sl, &ln));
    const cudaStream_t s = ln->stream;
    uint8_t* dp = ln->pkt.p;
    // From the arena queued at once; from other memory through the bounce buffer (to_device).
    SCCL_RETURN_IF_ERROR(to_device(dp, in, need, s, "packet to device"));
    SCCL_RETURN_IF_ERROR(kc::step(p, dp, need, x, t, n, dp, need, ln->ws.p, ln->ws.cap, s));
    SCCL_RETURN_IF_ERROR(to_host(out, dp, need, s, "packet to host"));
    SCCL_CUDA_RETURN(cudaMemcpyAsync(sl->verdict, ln->ws.p, sizeof(int), cudaMemcpyDeviceToHost, s),
                     "verdict to host");
    return finish(sl, s, true, ticket);
  }

  Status test(uint64_t ticket, bool* done) override {
    *done = false;
    Slot* sl = find(ticket);
    if (sl == nullptr) {
      return errorf(Code::kInternalError, "CUDA backend: unknown ticket %llu",
                    static_cast<unsigned long long>(ticket));
    }
    const cudaError_t e = cudaEventQuery(sl->done);
    if (e == cudaErrorNotReady) {
      // Not an error; make sure it does not linger as the thread's last error.
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      return Status::Ok();
    }
    *done = true;
    sl->ticket = 0;  // the slot is free again whatever the outcome
    if (e != cudaSuccess) return cuda_status(e, "codec work on the device");
    if (sl->check_verdict) SCCL_RETURN_IF_ERROR(kc::verdict_status(*sl->verdict));
    if (sl->stats_dst != nullptr) sl->stats_dst->set_counts(*sl->stats);
    return Status::Ok();
  }

  void* alloc_packets(size_t bytes) override {
    const size_t b = (bytes + 255) & ~size_t(255);
    {
      std::lock_guard<std::mutex> lock(arena_mu_);
      Arena& a = arena_;
      if (a.block.p != nullptr && a.block.cap - a.top >= b) {
        void* p = a.block.p + a.top;
        a.top += b;
        a.live++;
        return p;
      }
    }
    return std::aligned_alloc(64, b);  // beyond the reservation: plain memory
  }
  void free_packets(void* p) override {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(arena_mu_);
      if (in_block(arena_.block, p)) {
        if (--arena_.live == 0) arena_.top = 0;
        return;
      }
      for (const PinBuf& r : retired_) {
        if (in_block(r, p)) return;
      }
    }
    std::free(p);
  }
  // Grows to the largest size ever asked for. Called on the caller's thread at every device
  // AllReduce, also while streams are gated: cudaHostAlloc on the caller's thread does not
  // wait for this backend's proxy, and the proxy never allocates pinned memory (docs/cuda.md).
  Status reserve_packet_memory(size_t bytes) override {
    bytes = std::min(bytes, kArenaCap);
    {
      std::lock_guard<std::mutex> lock(arena_mu_);
      largest_wanted_ = std::max(largest_wanted_, bytes);
      bytes = largest_wanted_;
      if (arena_.block.cap >= bytes) return Status::Ok();
    }
    size_t cap = size_t(4) << 20;
    while (cap < bytes)
      cap *= 2;
    // On the caller's thread: allocate under this backend's device, then put the caller's back.
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
    PinBuf fresh;
    Status st = pin(&fresh, std::min(cap, kArenaCap));
    if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
    SCCL_RETURN_IF_ERROR(st);
    std::lock_guard<std::mutex> lock(arena_mu_);
    // Packets of an operation still running stay valid in a retired block; new ones go here.
    if (fresh.cap <= arena_.block.cap) {
      retired_.push_back(fresh);  // grown meanwhile by another caller
    } else {
      if (arena_.block.p != nullptr) retired_.push_back(arena_.block);
      arena_ = Arena{fresh, 0, 0};
    }
    return Status::Ok();
  }

  // Queued like a step: packet H2D, the decode kernel into `y`, statistics and verdict back into
  // the slot, an event (s2 too: its peeling rounds are all enqueued, none waits for the host). A
  // decode with every decode slot taken runs at once instead.
  Status decode_start(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t,
                      size_t n, float scale, kernels::DecodeStats* stats,
                      uint64_t* ticket) override {
    *ticket = 0;
    Slot* sl = nullptr;
    // The unresolved positions (s2's repair) come back at once: the engine reads them after the
    // ring anyway, and they need a host copy of their own.
    if ((stats != nullptr && stats->unresolved != nullptr) || (sl = acquire_decode()) == nullptr) {
      return decode(p, pkt, bytes, y, t, n, scale, stats);
    }
    SCCL_RETURN_IF_ERROR(
        queue_decode(p, pkt, bytes, y, t, n, scale, stats != nullptr ? sl->stats : nullptr));
    SCCL_CUDA_RETURN(
        cudaMemcpyAsync(sl->verdict, ws_.p, sizeof(int), cudaMemcpyDeviceToHost, stream_),
        "verdict to host");
    SCCL_RETURN_IF_ERROR(finish(sl, stream_, true, ticket));
    sl->stats_dst = stats;
    return Status::Ok();
  }

  Status decode(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t, size_t n,
                float scale, kernels::DecodeStats* stats) override {
    auto* stats_host = reinterpret_cast<kernels::DecodeStats*>(small_.p + kStatsOffset);
    uint64_t* unres_host = stats != nullptr ? stats->unresolved : nullptr;
    const size_t unres_bytes = (n + 63) / 64 * 8;  // DecodeStats::unresolved: one bit per element
    if (unres_host != nullptr) SCCL_RETURN_IF_ERROR(ensure(unres_, unres_bytes));
    SCCL_RETURN_IF_ERROR(
        queue_decode(p, pkt, bytes, y, t, n, scale, stats != nullptr ? stats_host : nullptr,
                     unres_host != nullptr ? reinterpret_cast<uint64_t*>(unres_.p) : nullptr));
    int* verdict = reinterpret_cast<int*>(small_.p + kVerdictOffset);
    SCCL_CUDA_RETURN(cudaMemcpyAsync(verdict, ws_.p, sizeof(int), cudaMemcpyDeviceToHost, stream_),
                     "verdict to host");
    if (unres_host != nullptr && p.codec == kernels::CodecId::kS2) {
      SCCL_RETURN_IF_ERROR(
          to_host(unres_host, unres_.p, unres_bytes, stream_, "s2 unresolved positions to host"));
    }
    SCCL_RETURN_IF_ERROR(sync(stream_, "decode"));
    SCCL_RETURN_IF_ERROR(kc::verdict_status(*verdict));
    if (stats != nullptr) stats->set_counts(*stats_host);
    return Status::Ok();
  }

  // Error feedback on the device: the residual and scratch are device arrays; only the two
  // sums come back to the host.
  Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) override;
  Status ef_compensate(const void* x, ElemType t, size_t n, const float* residual,
                       float* out) override {
    main_dirty_ = true;  // the next lane work reads `out`
    return kc::ef_compensate(x, t, n, residual, out, stream_);
  }
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override {
    SCCL_RETURN_IF_ERROR(ensure(ef_sums_, 2 * sizeof(double)));
    auto* dsums = reinterpret_cast<double*>(ef_sums_.p);
    SCCL_RETURN_IF_ERROR(kc::ef_update(comp, in, out, n, residual, dsums, stream_));
    auto* hsums = reinterpret_cast<double*>(small_.p + kEfSumsOffset);
    SCCL_CUDA_RETURN(
        cudaMemcpyAsync(hsums, dsums, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream_),
        "error feedback sums to host");
    SCCL_RETURN_IF_ERROR(sync(stream_, "error feedback"));
    sums->input_sq = hsums[0];
    sums->residual_sq = hsums[1];
    return Status::Ok();
  }
  // The two-shot scheme's fp32 sums on device arrays (alloc_f32), on the main stream, in the
  // host backend's order (kernels/host/sum_host.cc): the same bits.
  bool sums() const override { return true; }
  Status zero_f32(float* a, size_t n) override {
    if (n == 0) return Status::Ok();
    main_dirty_ = true;  // a later encode on a lane may read it
    SCCL_CUDA_RETURN(cudaMemsetAsync(a, 0, n * sizeof(float), stream_), "cudaMemsetAsync");
    return Status::Ok();
  }
  Status load_sum(const void* x, ElemType t, size_t n, float* sum) override {
    main_dirty_ = true;
    return kc::load_sum(x, t, n, sum, stream_);
  }
  // The contribution decoded at scale 1 into device scratch, then added: a decode's checks and
  // verdict as decode()'s.
  Status decode_add(const CodecParams& p, const void* pkt, size_t bytes, float* sum,
                    size_t n) override {
    if (n == 0) return Status::Ok();
    SCCL_RETURN_IF_ERROR(ensure(sum_tmp_, n * sizeof(float)));
    auto* tmp = reinterpret_cast<float*>(sum_tmp_.p);
    SCCL_RETURN_IF_ERROR(queue_decode(p, pkt, bytes, tmp, ElemType::kF32, n, 1.0f, nullptr));
    int* verdict = reinterpret_cast<int*>(small_.p + kVerdictOffset);
    SCCL_CUDA_RETURN(cudaMemcpyAsync(verdict, ws_.p, sizeof(int), cudaMemcpyDeviceToHost, stream_),
                     "verdict to host");
    SCCL_RETURN_IF_ERROR(kc::add_sum(tmp, n, sum, stream_));
    SCCL_RETURN_IF_ERROR(sync(stream_, "decode of a contribution into the fp32 sum"));
    return kc::verdict_status(*verdict);
  }
  Status store_sum(const float* sum, size_t n, float scale, void* y, ElemType t) override {
    if (n == 0) return Status::Ok();
    main_dirty_ = true;
    SCCL_RETURN_IF_ERROR(kc::store_sum(sum, n, scale, t, y, stream_));
    return sync(stream_, "store of the reduced chunk");
  }

  // Gives back an alloc_f32 array's memory, stream-ordered, under this backend's device.
  void free_f32(void* base) {
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    if (cudaSetDevice(dev_) == cudaSuccess) cudaFreeAsync(base, stream_);
    if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
    cudaGetLastError();
  }

  // Bitmaps are host memory (they are the packets of the sparse codec's first phase).
  Status bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) override {
    const size_t bytes = kernels::bitmap_bytes(n);
    if (n == 0) return Status::Ok();
    SCCL_RETURN_IF_ERROR(ensure(bits_, bytes));
    kc::bitmap_build(x, t, n, reinterpret_cast<uint64_t*>(bits_.p), stream_);
    SCCL_CUDA_RETURN(cudaGetLastError(), "bitmap_build launch");
    // Words covering the first n elements: bitmap_build writes exactly these on the host too.
    SCCL_RETURN_IF_ERROR(to_host(bits, bits_.p, bytes, stream_, "bitmap copy"));
    SCCL_RETURN_IF_ERROR(sync(stream_, "bitmap_build"));
    return Status::Ok();
  }
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    kernels::bitmap_or(acc, other, n);
    return Status::Ok();
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    *count = kernels::bitmap_popcount(bits, n);
    return Status::Ok();
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out,
                        size_t* count) override {
    const size_t m = kernels::bitmap_popcount(bits, n);
    if (count != nullptr) *count = 0;
    if (n == 0) return Status::Ok();
    SCCL_RETURN_IF_ERROR(to_device_bits(bits, n));
    SCCL_RETURN_IF_ERROR(ensure(vals_, m * sizeof(float) + 4));
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::sparse_workspace_bytes(n)));
    kc::sparse_compact(reinterpret_cast<const uint64_t*>(bits_.p), n, x, t,
                       reinterpret_cast<float*>(vals_.p), ws_.p, stream_);
    SCCL_CUDA_RETURN(cudaGetLastError(), "sparse_compact launch");
    SCCL_RETURN_IF_ERROR(
        to_host(out, vals_.p, m * sizeof(float), stream_, "sparse values to host"));
    SCCL_RETURN_IF_ERROR(sync(stream_, "sparse_compact"));
    if (count != nullptr) *count = m;
    return Status::Ok();
  }
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        ElemType t, size_t* count) override {
    const size_t m = kernels::bitmap_popcount(bits, n);
    if (count != nullptr) *count = 0;
    if (n == 0) return Status::Ok();
    SCCL_RETURN_IF_ERROR(to_device_bits(bits, n));
    SCCL_RETURN_IF_ERROR(ensure(vals_, m * sizeof(float) + 4));
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::sparse_workspace_bytes(n)));
    SCCL_RETURN_IF_ERROR(
        to_device(vals_.p, vals, m * sizeof(float), stream_, "sparse values to device"));
    kc::sparse_scatter(reinterpret_cast<const uint64_t*>(bits_.p), n,
                       reinterpret_cast<const float*>(vals_.p), scale, y, t, ws_.p, stream_);
    SCCL_CUDA_RETURN(cudaGetLastError(), "sparse_scatter launch");
    SCCL_RETURN_IF_ERROR(sync(stream_, "sparse_scatter"));
    if (count != nullptr) *count = m;
    return Status::Ok();
  }

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return Status::Ok();
    SCCL_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "device copy");
    SCCL_RETURN_IF_ERROR(sync(stream_, "device copy"));
    return Status::Ok();
  }

 private:
  // Queues the decode of `pkt` into device memory `y`: the packet to the device, the decode
  // kernel, and its statistics into `stats_host` (pinned; none when null).
  Status queue_decode(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t,
                      size_t n, float scale, kernels::DecodeStats* stats_host,
                      uint64_t* unresolved_dev = nullptr) {
    const size_t need = kernels::packet_bytes(p, n);
    if (bytes < need) {
      return errorf(Code::kInvalidArgument, "codec %s: truncated packet (%zu bytes, expected %zu)",
                    kernels::codec_name(p.codec), bytes, need);
    }
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::workspace_bytes(p, n)));
    SCCL_RETURN_IF_ERROR(ensure(pkt_, need));
    SCCL_RETURN_IF_ERROR(ensure(stats_, sizeof(kernels::DecodeStats)));
    main_dirty_ = true;  // writes `y`, which a later lane's work may read
    SCCL_RETURN_IF_ERROR(to_device(pkt_.p, pkt, need, stream_, "packet to device"));
    auto* dstats = reinterpret_cast<kernels::DecodeStats*>(stats_.p);
    SCCL_RETURN_IF_ERROR(kc::decode(p, pkt_.p, need, y, t, n, scale,
                                    stats_host != nullptr ? dstats : nullptr, ws_.p, ws_.cap,
                                    stream_, unresolved_dev));
    if (stats_host != nullptr) {
      SCCL_CUDA_RETURN(cudaMemcpyAsync(stats_host, dstats, sizeof(kernels::DecodeStats),
                                       cudaMemcpyDeviceToHost, stream_),
                       "decode statistics to host");
    }
    return Status::Ok();
  }

  // What encode_start and step_start need first: an output of `cap` bytes big enough, device
  // workspace and packet buffer for (p, n), a free slot.
  // workspace and packet buffer for (p, n) on the slot's lane, a free slot. Work queued on the
  // main stream before (error feedback's compensation) is waited for by the lane stream.
  Status begin(const CodecParams& p, size_t n, size_t cap, Slot** sl, Lane** ln) {
    const size_t need = kernels::packet_bytes(p, n);
    if (cap < need) {
      return errorf(Code::kInternalError, "CUDA backend: packet buffer of %zu bytes, need %zu", cap,
                    need);
    }
    int index = 0;
    SCCL_RETURN_IF_ERROR(acquire(sl, &index));
    Lane& l = lanes_[index % kLaneStreams];
    SCCL_RETURN_IF_ERROR(ensure(l.ws, kc::workspace_bytes(p, n), l.stream));
    SCCL_RETURN_IF_ERROR(ensure(l.pkt, need, l.stream));
    if (main_dirty_) {
      SCCL_CUDA_RETURN(cudaEventRecord(main_ev_, stream_), "cudaEventRecord");
      main_dirty_ = false;
    }
    // Cheap when main_ev_ has long completed; keeps lanes after the main stream's earlier work.
    SCCL_CUDA_RETURN(cudaStreamWaitEvent(l.stream, main_ev_, 0), "cudaStreamWaitEvent");
    *ln = &l;
    return Status::Ok();
  }
  // A free lane slot (encode, step): at most SKETCHCCL_PIPELINE_DEPTH are taken at a time.
  Status acquire(Slot** out, int* index) {
    for (int i = 0; i < kLaneSlots; ++i) {
      if (slots_[i]->ticket == 0) {
        *out = slots_[i].get();
        *index = i;
        return Status::Ok();
      }
    }
    return errorf(Code::kInternalError, "CUDA backend: more than %d encodes and steps in flight",
                  kLaneSlots);
  }
  // A free decode slot, or null when all are taken (the decode then runs at once).
  Slot* acquire_decode() {
    for (int i = kLaneSlots; i < kSlots; ++i) {
      if (slots_[i]->ticket == 0) return slots_[i].get();
    }
    return nullptr;
  }
  Slot* find(uint64_t ticket) {
    for (auto& s : slots_) {
      if (ticket != 0 && s->ticket == ticket) return s.get();
    }
    return nullptr;
  }
  Status finish(Slot* sl, cudaStream_t s, bool check_verdict, uint64_t* ticket) {
    SCCL_CUDA_RETURN(cudaEventRecord(sl->done, s), "cudaEventRecord");
    sl->ticket = next_ticket_++;
    sl->check_verdict = check_verdict;
    sl->stats_dst = nullptr;
    *ticket = sl->ticket;
    return Status::Ok();
  }
  Status wait(uint64_t ticket) {
    Slot* sl = find(ticket);
    if (sl != nullptr) {
      const Status st = wait_event(sl->done, "codec work on the device");
      if (!st.ok()) {
        sl->ticket = 0;
        return st;
      }
    }
    bool done = false;
    return test(ticket, &done);
  }
  // A polling wait for `ev` (not cudaEventSynchronize): bounded by SKETCHCCL_TIMEOUT and ended by
  // the abort flag, like every other wait of the proxy: a dead peer or an abort must never hang it.
  Status wait_event(cudaEvent_t ev, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      const cudaError_t e = cudaEventQuery(ev);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return cuda_status(e, what);
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      if (abort_ != nullptr && abort_->load()) {
        return errorf(Code::kRemoteError, "CUDA backend: %s: aborted while the device worked",
                      what);
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
          timeout_s_) {
        return errorf(Code::kRemoteError,
                      "CUDA backend: %s: the device did not finish within SKETCHCCL_TIMEOUT "
                      "(%.0f s)",
                      what, timeout_s_);
      }
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        usleep(20);
      }
    }
  }
  // Everything queued on `s` so far, waited for like wait_event.
  Status sync(cudaStream_t s, const char* what) {
    SCCL_CUDA_RETURN(cudaEventRecord(sync_ev_, s), "cudaEventRecord");
    return wait_event(sync_ev_, what);
  }
  static bool in_block(const PinBuf& b, const void* p) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    return b.p != nullptr && q >= b.p && q < b.p + b.cap;
  }
  Status pin(PinBuf* b, size_t bytes) {
    void* p = nullptr;
    SCCL_CUDA_RETURN(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    b->p = static_cast<uint8_t*>(p);
    b->cap = bytes;
    return Status::Ok();
  }

  // The backend's own memory pool (see DevBuf): no internal dependencies across streams, and
  // memory kept until the backend goes. Without memory pools (some vGPU and MIG setups) the device
  // path cannot be built, and the caller forwards.
  Status make_pool() {
    int supported = 0;
    SCCL_CUDA_RETURN(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev_),
                     "cudaDeviceGetAttribute(MemoryPoolsSupported)");
    if (supported == 0) {
      return errorf(Code::kUnhandledCudaError,
                    "CUDA backend: device %d does not support memory pools (cudaMallocAsync)",
                    dev_);
    }
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev_;
    SCCL_CUDA_RETURN(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    int off = 0;
    SCCL_CUDA_RETURN(
        cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &off),
        "cudaMemPoolSetAttribute(ReuseAllowInternalDependencies)");
    uint64_t keep = UINT64_MAX;
    SCCL_CUDA_RETURN(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep),
                     "cudaMemPoolSetAttribute(ReleaseThreshold)");
    return Status::Ok();
  }

  // Whether [p, p+bytes) is pinned memory of this backend (the arena, a retired block, the small
  // and bounce buffers): copies to and from it are queued without the host waiting.
  bool pinned(const void* p, size_t bytes) {
    const uint8_t* q = static_cast<const uint8_t*>(p);
    auto within = [&](const PinBuf& b) {
      return b.p != nullptr && q >= b.p && q + bytes <= b.p + b.cap;
    };
    if (within(small_) || within(bounce_)) return true;
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (within(arena_.block)) return true;
    for (const PinBuf& r : retired_) {
      if (within(r)) return true;
    }
    return false;
  }
  // Device -> host on `s`. Into pinned memory: queued, valid once `s` reaches it. Into other
  // memory: a chunk at a time through the bounce buffer, each chunk waited for with the bounded
  // poll, so the bytes are in place on return.
  Status to_host(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
    if (bytes == 0) return Status::Ok();
    if (pinned(dst, bytes)) {
      SCCL_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), what);
      return Status::Ok();
    }
    for (size_t off = 0; off < bytes; off += kBounceBytes) {
      const size_t len = std::min(kBounceBytes, bytes - off);
      SCCL_CUDA_RETURN(cudaMemcpyAsync(bounce_.p, static_cast<const uint8_t*>(src) + off, len,
                                       cudaMemcpyDeviceToHost, s),
                       what);
      SCCL_RETURN_IF_ERROR(sync(s, what));
      std::memcpy(static_cast<uint8_t*>(dst) + off, bounce_.p, len);
    }
    return Status::Ok();
  }
  // Host -> device on `s`. From pinned memory: queued (the source must stay until `s` reaches
  // it). From other memory: through the bounce buffer, each chunk waited for, so the source may
  // change on return.
  Status to_device(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
    if (bytes == 0) return Status::Ok();
    if (pinned(src, bytes)) {
      SCCL_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), what);
      return Status::Ok();
    }
    for (size_t off = 0; off < bytes; off += kBounceBytes) {
      const size_t len = std::min(kBounceBytes, bytes - off);
      std::memcpy(bounce_.p, static_cast<const uint8_t*>(src) + off, len);
      SCCL_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, bounce_.p, len,
                                       cudaMemcpyHostToDevice, s),
                       what);
      SCCL_RETURN_IF_ERROR(sync(s, what));
    }
    return Status::Ok();
  }

  Status to_device_bits(const uint64_t* bits, size_t n) {
    const size_t bytes = kernels::bitmap_bytes(n);
    SCCL_RETURN_IF_ERROR(ensure(bits_, bytes));
    return to_device(bits_.p, bits, bytes, stream_, "bitmap to device");
  }

  Status ensure(DevBuf& b, size_t bytes) { return ensure(b, bytes, stream_); }
  // Grows `b` stream-ordered on `stream`, the one stream that uses it.
  Status ensure(DevBuf& b, size_t bytes, cudaStream_t stream) {
    if (bytes <= b.cap) return Status::Ok();
    size_t cap = b.cap == 0 ? 4096 : b.cap;
    while (cap < bytes)
      cap *= 2;
    if (b.base != nullptr) {
      SCCL_CUDA_RETURN(cudaFreeAsync(b.base, stream), "cudaFreeAsync");
      b = DevBuf{};
    }
    void* base = nullptr;
    SCCL_CUDA_RETURN(cudaMallocFromPoolAsync(&base, cap + 256, pool_, stream),
                     "cudaMallocFromPoolAsync");
    b.base = base;
    b.p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + 255) & ~uintptr_t(255));
    b.cap = cap;
    return Status::Ok();
  }
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
  std::mutex arena_mu_;  // the arena is sized on the caller's thread, used on the proxy's
  Arena arena_;
  size_t largest_wanted_ = 0;  // the largest reservation asked for (under arena_mu_)
  std::vector<PinBuf> retired_;
  std::vector<void*> old_pinned_;
};

// Device memory handed out by alloc_f32, freed stream-ordered by the backend that made it.
class DevF32Array final : public F32Array {
 public:
  DevF32Array(CudaBackendImpl* owner, void* base, size_t n) : owner_(owner), base_(base) {
    data_ = static_cast<float*>(base);
    size_ = n;
  }
  ~DevF32Array() override {
    if (base_ != nullptr) owner_->free_f32(base_);
  }

 private:
  CudaBackendImpl* owner_;
  void* base_;
};

// Stream-ordered like the backend's own buffers (from the backend's pool: never synchronizes the
// device,
// which a gated stream may be waiting on), zeroed on the stream.
Status CudaBackendImpl::alloc_f32(size_t n, std::unique_ptr<F32Array>* out) {
  void* base = nullptr;
  if (n > 0) {
    SCCL_CUDA_RETURN(cudaMallocFromPoolAsync(&base, n * sizeof(float), pool_, stream_),
                     "cudaMallocFromPoolAsync");
    main_dirty_ = true;
    const cudaError_t e = cudaMemsetAsync(base, 0, n * sizeof(float), stream_);
    if (e != cudaSuccess) {
      cudaFreeAsync(base, stream_);
      return cuda_status(e, "cudaMemsetAsync");
    }
  }
  *out = std::make_unique<DevF32Array>(this, base, n);
  return Status::Ok();
}

}  // namespace

Status make_cuda_backend(int device, std::unique_ptr<CudaBackend>* out) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cuda_status(e, "cudaGetDeviceCount");
  if (device < 0 || device >= count) {
    return errorf(Code::kInvalidUsage, "CUDA backend: device %d, but %d device(s) visible", device,
                  count);
  }
  // init() makes `device` current; the calling thread's own device is put back.
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) {
    cudaGetLastError();
    prev = -1;
  }
  auto b = std::make_unique<CudaBackendImpl>(device);
  Status st = b->init();
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  SCCL_RETURN_IF_ERROR(st);
  *out = std::move(b);
  return Status::Ok();
}

#else  // !SKETCHCCL_HAVE_CUDA

Status make_cuda_backend(int, std::unique_ptr<CudaBackend>*) {
  return Status(Code::kUnhandledCudaError,
                "built without CUDA: device buffers need a build with nvcc (-Dcuda=enabled)");
}

#endif

}  // namespace sketchccl::backend
