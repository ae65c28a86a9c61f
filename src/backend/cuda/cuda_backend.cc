// The CUDA backend's lifetime (make, init, warm-up, teardown) and its codec work: encodes, steps
// and decodes queued on its streams, their slots and tickets, and the bounded waits for them.
#include "src/backend/cuda/cuda_backend.h"

#include "sketchccl_build_config.h"
#include "src/backend/cuda/cuda_backend_impl.h"

#if SKETCHCCL_HAVE_CUDA
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "src/backend/cuda/kernel_preload.h"
#include "src/backend/warm_up.h"
#endif

namespace sketchccl::backend {

#if SKETCHCCL_HAVE_CUDA
namespace cuda_impl {

Status cuda_status(cudaError_t e, const char* what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return errorf(Code::kUnhandledCudaError, "CUDA backend: %s: %s", what, cudaGetErrorString(e));
}

namespace {

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

}  // namespace

CudaBackendImpl::~CudaBackendImpl() {
  if (stream_ == nullptr) return;
  // Possibly on the application's thread (the last owner of the communicator): its current
  // device is put back afterwards.
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (cudaSetDevice(dev_) != cudaSuccess) {  // e.g. at exit, after the runtime unloaded
    cudaGetLastError();
    arena_.release(false);  // nothing known of the device: never leased again
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
  bool idle = true;
  for (Lane& l : lanes_) {
    if (l.stream == nullptr) continue;
    idle = sync(l.stream, "backend teardown").ok() && idle;
    cudaStreamDestroy(l.stream);
  }
  idle = sync(stream_, "backend teardown").ok() && idle;
  // The arena's blocks go back to the device's pool for other communicators, unless the device
  // may still write them.
  arena_.release(idle);
  if (sync_ev_ != nullptr) cudaEventDestroy(sync_ev_);
  if (main_ev_ != nullptr) cudaEventDestroy(main_ev_);
  cudaStreamDestroy(stream_);
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);  // released once its frees completed
  for (auto& sl : slots_) {
    if (sl->done != nullptr) cudaEventDestroy(sl->done);
  }
  for (PinBuf* b : {&small_, &bounce_}) {
    if (b->p != nullptr) cudaFreeHost(b->p);
  }
  if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
  cudaGetLastError();
}

Status CudaBackendImpl::init() {
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

Status CudaBackendImpl::warm_up() {
  std::unique_ptr<F32Array> x, y;
  SCCL_RETURN_IF_ERROR(alloc_f32(kWarmUpElems, &x));
  SCCL_RETURN_IF_ERROR(alloc_f32(kWarmUpElems, &y));
  // Finite non-zero values in every element type (bytes 0x3c: about 0.0115 or 1.06).
  SCCL_CUDA_RETURN(cudaMemsetAsync(x->data(), 0x3c, kWarmUpElems * sizeof(float), stream_),
                   "warm-up input");
  SCCL_RETURN_IF_ERROR(warm_up_backend(*this, x->data(), y->data()));
  return sync(stream_, "warm-up");
}

Status CudaBackendImpl::activate() {
  relax_capture_mode_once();
  SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
  return Status::Ok();
}

Status CudaBackendImpl::quiesce() {
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

Status CudaBackendImpl::encode_start(const CodecParams& p, const void* x, ElemType t, size_t n,
                                     void* pkt, size_t cap, uint64_t* ticket) {
  *ticket = 0;
  const size_t need = kernels::packet_bytes(p, n);
  Slot* sl = nullptr;
  Lane* ln = nullptr;
  SCCL_RETURN_IF_ERROR(begin(p, n, cap, &sl, &ln));
  SCCL_RETURN_IF_ERROR(kc::encode(p, x, t, n, ln->pkt.p, need, ln->ws.p, ln->ws.cap, ln->stream));
  SCCL_RETURN_IF_ERROR(to_host(pkt, ln->pkt.p, need, ln->stream, "packet to host"));
  return finish(sl, ln->stream, false, ticket);
}

Status CudaBackendImpl::step_start(const CodecParams& p, const void* in, size_t in_bytes,
                                   const void* x, ElemType t, size_t n, void* out, size_t cap,
                                   uint64_t* ticket) {
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

Status CudaBackendImpl::test(uint64_t ticket, bool* done) {
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

Status CudaBackendImpl::decode_start(const CodecParams& p, const void* pkt, size_t bytes, void* y,
                                     ElemType t, size_t n, float scale, kernels::DecodeStats* stats,
                                     uint64_t* ticket) {
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

Status CudaBackendImpl::decode(const CodecParams& p, const void* pkt, size_t bytes, void* y,
                               ElemType t, size_t n, float scale, kernels::DecodeStats* stats) {
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

Status CudaBackendImpl::queue_decode(const CodecParams& p, const void* pkt, size_t bytes, void* y,
                                     ElemType t, size_t n, float scale,
                                     kernels::DecodeStats* stats_host, uint64_t* unresolved_dev) {
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
                                  stats_host != nullptr ? dstats : nullptr, ws_.p, ws_.cap, stream_,
                                  unresolved_dev));
  if (stats_host != nullptr) {
    SCCL_CUDA_RETURN(cudaMemcpyAsync(stats_host, dstats, sizeof(kernels::DecodeStats),
                                     cudaMemcpyDeviceToHost, stream_),
                     "decode statistics to host");
  }
  return Status::Ok();
}

Status CudaBackendImpl::begin(const CodecParams& p, size_t n, size_t cap, Slot** sl, Lane** ln) {
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

Status CudaBackendImpl::acquire(Slot** out, int* index) {
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

Slot* CudaBackendImpl::acquire_decode() {
  for (int i = kLaneSlots; i < kSlots; ++i) {
    if (slots_[i]->ticket == 0) return slots_[i].get();
  }
  return nullptr;
}

Slot* CudaBackendImpl::find(uint64_t ticket) {
  for (auto& s : slots_) {
    if (ticket != 0 && s->ticket == ticket) return s.get();
  }
  return nullptr;
}

Status CudaBackendImpl::finish(Slot* sl, cudaStream_t s, bool check_verdict, uint64_t* ticket) {
  SCCL_CUDA_RETURN(cudaEventRecord(sl->done, s), "cudaEventRecord");
  sl->ticket = next_ticket_++;
  sl->check_verdict = check_verdict;
  sl->stats_dst = nullptr;
  *ticket = sl->ticket;
  return Status::Ok();
}

Status CudaBackendImpl::wait(uint64_t ticket) {
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

Status CudaBackendImpl::wait_event(cudaEvent_t ev, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) return cuda_status(e, what);
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    if (abort_ != nullptr && abort_->load()) {
      return errorf(Code::kRemoteError, "CUDA backend: %s: aborted while the device worked", what);
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s_) {
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

Status CudaBackendImpl::sync(cudaStream_t s, const char* what) {
  SCCL_CUDA_RETURN(cudaEventRecord(sync_ev_, s), "cudaEventRecord");
  return wait_event(sync_ev_, what);
}

}  // namespace cuda_impl

Status make_cuda_backend(int device, std::unique_ptr<CudaBackend>* out) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cuda_impl::cuda_status(e, "cudaGetDeviceCount");
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
  auto b = std::make_unique<cuda_impl::CudaBackendImpl>(device);
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
