#include "backend/cuda/cuda_backend.h"

#include <cstring>
#include <vector>

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/convert.h"
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

// Device memory that grows, stream-ordered (cudaMallocAsync/cudaFreeAsync on the backend's
// stream): unlike cudaMalloc/cudaFree these never synchronize the device, which matters because
// the caller's stream may be held by the stream gate while the proxy allocates.
struct DevBuf {
  void* base = nullptr;
  uint8_t* p = nullptr;  // 256-aligned
  size_t cap = 0;
};

// Pinned host staging that grows. Old blocks are kept until the backend is destroyed:
// cudaFreeHost may synchronize the device (see DevBuf).
struct PinBuf {
  uint8_t* p = nullptr;
  size_t cap = 0;
};

// One encode or step in flight: its pinned staging, its completion event, where its packet goes.
struct Slot {
  PinBuf in, out;  // incoming packet; outgoing packet, then (step) the device's verdict
  cudaEvent_t done = nullptr;
  uint64_t ticket = 0;  // 0: free
  void* dst = nullptr;
  size_t bytes = 0;
  bool verdict = false;
};

// Slots prepared at creation: the default SKETCHCCL_PIPELINE_DEPTH, so the first operations do
// not allocate pinned memory while a stream gate holds the caller's stream.
constexpr int kPreparedSlots = 4;

size_t verdict_offset(size_t packet_bytes) {
  return (packet_bytes + 7) & ~size_t(7);
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
    for (DevBuf* b : {&ws_, &pkt_, &stats_, &bits_, &vals_, &xbuf_}) {
      if (b->base != nullptr) cudaFreeAsync(b->base, stream_);
    }
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    for (PinBuf* b : {&pin_in_, &pin_out_}) {
      if (b->p != nullptr) old_pinned_.push_back(b->p);
    }
    for (auto& sl : slots_) {
      for (PinBuf* b : {&sl->in, &sl->out}) {
        if (b->p != nullptr) old_pinned_.push_back(b->p);
      }
      if (sl->done != nullptr) cudaEventDestroy(sl->done);
    }
    for (void* p : old_pinned_)
      cudaFreeHost(p);
    if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
    cudaGetLastError();
  }

  Status init() {
    SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
    SCCL_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags");
    // Staging for typical packets (a 1 MiB slice of fp32 is a 1 MiB `none` packet) up front,
    // so the first calls do not allocate pinned memory while a gate holds a stream.
    SCCL_RETURN_IF_ERROR(ensure(pin_in_, size_t(2) << 20));
    SCCL_RETURN_IF_ERROR(ensure(pin_out_, size_t(2) << 20));
    for (int i = 0; i < kPreparedSlots; ++i) {
      Slot* sl = nullptr;
      SCCL_RETURN_IF_ERROR(new_slot(size_t(2) << 20, &sl));
    }
    return Status::Ok();
  }

  const char* name() const override { return "cuda"; }
  int device() const override { return dev_; }
  Status activate() override {
    SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
    return Status::Ok();
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

  // Queued on the backend's stream: the codec kernels into the device packet, the packet to the
  // slot's pinned staging, an event. test() copies it to `pkt` when the event has passed.
  Status encode_start(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt,
                      size_t cap, uint64_t* ticket) override {
    *ticket = 0;
    const size_t need = kernels::packet_bytes(p, n);
    if (cap < need) {
      return errorf(Code::kInternalError, "CUDA backend: packet buffer of %zu bytes, need %zu", cap,
                    need);
    }
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::workspace_bytes(p, n)));
    SCCL_RETURN_IF_ERROR(ensure(pkt_, need));
    Slot* sl = nullptr;
    SCCL_RETURN_IF_ERROR(acquire(need, &sl));
    SCCL_RETURN_IF_ERROR(device_input(&x, t, n));
    SCCL_RETURN_IF_ERROR(kc::encode(p, x, t, n, pkt_.p, need, ws_.p, ws_.cap, stream_));
    SCCL_CUDA_RETURN(cudaMemcpyAsync(sl->out.p, pkt_.p, need, cudaMemcpyDeviceToHost, stream_),
                     "packet to host");
    return finish(sl, pkt, need, false, ticket);
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
    if (cap < need) {
      return errorf(Code::kInternalError, "CUDA backend: packet buffer of %zu bytes, need %zu", cap,
                    need);
    }
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::workspace_bytes(p, n)));
    SCCL_RETURN_IF_ERROR(ensure(pkt_, need));
    Slot* sl = nullptr;
    SCCL_RETURN_IF_ERROR(acquire(need, &sl));
    std::memcpy(sl->in.p, in, need);
    SCCL_CUDA_RETURN(cudaMemcpyAsync(pkt_.p, sl->in.p, need, cudaMemcpyHostToDevice, stream_),
                     "packet to device");
    SCCL_RETURN_IF_ERROR(device_input(&x, t, n));
    SCCL_RETURN_IF_ERROR(kc::step(p, pkt_.p, need, x, t, n, pkt_.p, need, ws_.p, ws_.cap, stream_));
    SCCL_CUDA_RETURN(cudaMemcpyAsync(sl->out.p, pkt_.p, need, cudaMemcpyDeviceToHost, stream_),
                     "packet to host");
    SCCL_CUDA_RETURN(cudaMemcpyAsync(sl->out.p + verdict_offset(need), ws_.p, sizeof(int),
                                     cudaMemcpyDeviceToHost, stream_),
                     "verdict to host");
    return finish(sl, out, need, true, ticket);
  }

  Status test(uint64_t ticket, bool* done) override {
    *done = false;
    Slot* sl = find(ticket);
    if (sl == nullptr) {
      return errorf(Code::kInternalError, "CUDA backend: unknown ticket %llu",
                    static_cast<unsigned long long>(ticket));
    }
    const cudaError_t e = cudaEventQuery(sl->done);
    if (e == cudaErrorNotReady) return Status::Ok();
    *done = true;
    sl->ticket = 0;  // the slot is free again whatever the outcome
    if (e != cudaSuccess) return cuda_status(e, "codec work on the device");
    if (sl->verdict) {
      int v = 0;
      std::memcpy(&v, sl->out.p + verdict_offset(sl->bytes), sizeof(v));
      SCCL_RETURN_IF_ERROR(kc::verdict_status(v));
    }
    std::memcpy(sl->dst, sl->out.p, sl->bytes);
    return Status::Ok();
  }

  Status decode(const CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t, size_t n,
                float scale, kernels::DecodeStats* stats) override {
    const size_t need = kernels::packet_bytes(p, n);
    if (bytes < need) {
      return errorf(Code::kInvalidArgument, "codec %s: truncated packet (%zu bytes, expected %zu)",
                    kernels::codec_name(p.codec), bytes, need);
    }
    SCCL_RETURN_IF_ERROR(ensure_ws(kc::workspace_bytes(p, n)));
    SCCL_RETURN_IF_ERROR(ensure(pkt_, need));
    SCCL_RETURN_IF_ERROR(ensure(pin_in_, need));
    SCCL_RETURN_IF_ERROR(ensure(pin_out_, sizeof(kernels::DecodeStats)));
    SCCL_RETURN_IF_ERROR(ensure(stats_, sizeof(kernels::DecodeStats)));
    std::memcpy(pin_in_.p, pkt, need);
    SCCL_CUDA_RETURN(cudaMemcpyAsync(pkt_.p, pin_in_.p, need, cudaMemcpyHostToDevice, stream_),
                     "packet to device");
    auto* dstats = reinterpret_cast<kernels::DecodeStats*>(stats_.p);
    // Host output (error feedback decodes packets into host scratch): via device scratch.
    void* host_y = nullptr;
    const size_t ybytes = n * kernels::elem_size(t);
    if (n > 0 && !on_device(y)) {
      SCCL_RETURN_IF_ERROR(ensure(xbuf_, ybytes));
      host_y = y;
      y = xbuf_.p;
    }
    SCCL_RETURN_IF_ERROR(kc::decode(p, pkt_.p, need, y, t, n, scale,
                                    stats != nullptr ? dstats : nullptr, ws_.p, ws_.cap, stream_));
    if (host_y != nullptr) {
      SCCL_CUDA_RETURN(cudaMemcpyAsync(host_y, y, ybytes, cudaMemcpyDeviceToHost, stream_),
                       "decoded values to host");
    }
    if (stats != nullptr) {
      SCCL_CUDA_RETURN(cudaMemcpyAsync(pin_out_.p, dstats, sizeof(kernels::DecodeStats),
                                       cudaMemcpyDeviceToHost, stream_),
                       "decode statistics to host");
    }
    SCCL_RETURN_IF_ERROR(kc::read_device_error(ws_.p, stream_));  // synchronizes
    if (stats != nullptr) std::memcpy(stats, pin_out_.p, sizeof(kernels::DecodeStats));
    return Status::Ok();
  }

  // fp32 view of a device slice, on the host (error feedback compensates slices there).
  void load_f32(const void* x, ElemType t, size_t n, float* out) override {
    if (n == 0) return;
    const size_t bytes = n * kernels::elem_size(t);
    host_tmp_.resize(bytes);
    if (!keep(cudaMemcpyAsync(host_tmp_.data(), x, bytes, cudaMemcpyDeviceToHost, stream_),
              "load_f32 copy") ||
        !keep(cudaStreamSynchronize(stream_), "load_f32")) {
      std::memset(out, 0, n * sizeof(float));
      return;
    }
    kernels::load_f32(host_tmp_.data(), t, n, out);
  }

  // Bitmaps are host memory (they are the packets of the sparse codec's first phase).
  void bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) override {
    const size_t bytes = kernels::bitmap_bytes(n);
    if (n == 0) return;
    if (!keep(ensure(bits_, bytes))) return;
    kc::bitmap_build(x, t, n, reinterpret_cast<uint64_t*>(bits_.p), stream_);
    if (!keep(cudaGetLastError(), "bitmap_build launch")) return;
    // Words covering the first n elements: bitmap_build writes exactly these on the host too.
    keep(cudaMemcpyAsync(bits, bits_.p, bytes, cudaMemcpyDeviceToHost, stream_), "bitmap copy");
    keep(cudaStreamSynchronize(stream_), "bitmap_build");
  }
  void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    kernels::bitmap_or(acc, other, n);
  }
  size_t bitmap_popcount(const uint64_t* bits, size_t n) override {
    return kernels::bitmap_popcount(bits, n);
  }
  size_t sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t,
                        float* out) override {
    const size_t count = kernels::bitmap_popcount(bits, n);
    if (n == 0) return 0;
    if (!to_device_bits(bits, n)) return 0;
    if (!keep(ensure(vals_, count * sizeof(float) + 4)) ||
        !keep(ensure_ws(kc::sparse_workspace_bytes(n)))) {
      return 0;
    }
    kc::sparse_compact(reinterpret_cast<const uint64_t*>(bits_.p), n, x, t,
                       reinterpret_cast<float*>(vals_.p), ws_.p, stream_);
    if (!keep(cudaGetLastError(), "sparse_compact launch")) return 0;
    if (count > 0) {
      keep(cudaMemcpyAsync(out, vals_.p, count * sizeof(float), cudaMemcpyDeviceToHost, stream_),
           "sparse values to host");
    }
    keep(cudaStreamSynchronize(stream_), "sparse_compact");
    return count;
  }
  size_t sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        ElemType t) override {
    const size_t count = kernels::bitmap_popcount(bits, n);
    if (n == 0) return 0;
    if (!to_device_bits(bits, n)) return 0;
    if (!keep(ensure(vals_, count * sizeof(float) + 4)) ||
        !keep(ensure_ws(kc::sparse_workspace_bytes(n)))) {
      return 0;
    }
    if (count > 0 && !keep(cudaMemcpyAsync(vals_.p, vals, count * sizeof(float),
                                           cudaMemcpyHostToDevice, stream_),
                           "sparse values to device")) {
      return 0;
    }
    kc::sparse_scatter(reinterpret_cast<const uint64_t*>(bits_.p), n,
                       reinterpret_cast<const float*>(vals_.p), scale, y, t, ws_.p, stream_);
    keep(cudaGetLastError(), "sparse_scatter launch");
    keep(cudaStreamSynchronize(stream_), "sparse_scatter");
    return count;
  }

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return Status::Ok();
    SCCL_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "device copy");
    SCCL_CUDA_RETURN(cudaStreamSynchronize(stream_), "device copy");
    return Status::Ok();
  }

  Status take_error() override {
    Status st = std::move(err_);
    err_ = Status::Ok();
    return st;
  }

 private:
  bool keep(Status st) {
    if (st.ok()) return true;
    if (err_.ok()) err_ = std::move(st);
    return false;
  }
  bool keep(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    return keep(cuda_status(e, what));
  }
  // True for device (or managed) memory; host memory of any kind is staged.
  static bool on_device(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }
  // The user's slice is normally device memory. Error feedback hands host fp32 slices (the
  // slice plus its residual, built on the host): those are copied to device scratch first.
  Status device_input(const void** x, ElemType t, size_t n) {
    if (n == 0 || on_device(*x)) return Status::Ok();
    const size_t bytes = n * kernels::elem_size(t);
    SCCL_RETURN_IF_ERROR(ensure(xbuf_, bytes));
    SCCL_CUDA_RETURN(cudaMemcpyAsync(xbuf_.p, *x, bytes, cudaMemcpyHostToDevice, stream_),
                     "host slice to device");
    *x = xbuf_.p;
    return Status::Ok();
  }

  Status new_slot(size_t bytes, Slot** out) {
    auto sl = std::make_unique<Slot>();
    SCCL_CUDA_RETURN(cudaEventCreateWithFlags(&sl->done, cudaEventDisableTiming),
                     "cudaEventCreateWithFlags");
    slots_.push_back(std::move(sl));
    Slot* s = slots_.back().get();
    SCCL_RETURN_IF_ERROR(ensure(s->in, bytes));
    SCCL_RETURN_IF_ERROR(ensure(s->out, bytes));
    *out = s;
    return Status::Ok();
  }
  // A free slot whose staging holds a packet of `need` bytes and the verdict after it.
  Status acquire(size_t need, Slot** out) {
    Slot* sl = nullptr;
    for (auto& s : slots_) {
      if (s->ticket == 0) {
        sl = s.get();
        break;
      }
    }
    const size_t bytes = verdict_offset(need) + sizeof(int);
    if (sl == nullptr) return new_slot(bytes, out);  // more lanes in flight than prepared
    SCCL_RETURN_IF_ERROR(ensure(sl->in, bytes));
    SCCL_RETURN_IF_ERROR(ensure(sl->out, bytes));
    *out = sl;
    return Status::Ok();
  }
  Slot* find(uint64_t ticket) {
    for (auto& s : slots_) {
      if (ticket != 0 && s->ticket == ticket) return s.get();
    }
    return nullptr;
  }
  // Marks the end of the slot's queued work; its packet goes to dst in test().
  Status finish(Slot* sl, void* dst, size_t bytes, bool verdict, uint64_t* ticket) {
    SCCL_CUDA_RETURN(cudaEventRecord(sl->done, stream_), "cudaEventRecord");
    sl->ticket = next_ticket_++;
    sl->dst = dst;
    sl->bytes = bytes;
    sl->verdict = verdict;
    *ticket = sl->ticket;
    return Status::Ok();
  }
  Status wait(uint64_t ticket) {
    Slot* sl = find(ticket);
    if (sl != nullptr) {
      const cudaError_t e = cudaEventSynchronize(sl->done);
      if (e != cudaSuccess) {
        sl->ticket = 0;
        return cuda_status(e, "codec work on the device");
      }
    }
    bool done = false;
    return test(ticket, &done);
  }

  bool to_device_bits(const uint64_t* bits, size_t n) {
    const size_t bytes = kernels::bitmap_bytes(n);
    if (!keep(ensure(bits_, bytes))) return false;
    // Pageable source: the copy returns once the bytes are staged by the driver.
    return keep(cudaMemcpyAsync(bits_.p, bits, bytes, cudaMemcpyHostToDevice, stream_),
                "bitmap to device");
  }

  Status ensure(DevBuf& b, size_t bytes) {
    if (bytes <= b.cap) return Status::Ok();
    size_t cap = b.cap == 0 ? 4096 : b.cap;
    while (cap < bytes)
      cap *= 2;
    if (b.base != nullptr) {
      SCCL_CUDA_RETURN(cudaFreeAsync(b.base, stream_), "cudaFreeAsync");
      b = DevBuf{};
    }
    void* base = nullptr;
    SCCL_CUDA_RETURN(cudaMallocAsync(&base, cap + 256, stream_), "cudaMallocAsync");
    b.base = base;
    b.p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + 255) & ~uintptr_t(255));
    b.cap = cap;
    return Status::Ok();
  }
  Status ensure_ws(size_t bytes) { return ensure(ws_, bytes); }
  Status ensure(PinBuf& b, size_t bytes) {
    if (bytes <= b.cap) return Status::Ok();
    size_t cap = b.cap == 0 ? 4096 : b.cap;
    while (cap < bytes)
      cap *= 2;
    void* p = nullptr;
    SCCL_CUDA_RETURN(cudaHostAlloc(&p, cap, cudaHostAllocPortable), "cudaHostAlloc (staging)");
    if (b.p != nullptr) old_pinned_.push_back(b.p);
    b.p = static_cast<uint8_t*>(p);
    b.cap = cap;
    return Status::Ok();
  }

  const int dev_;
  cudaStream_t stream_ = nullptr;
  DevBuf ws_, pkt_, stats_, bits_, vals_, xbuf_;
  PinBuf pin_in_, pin_out_;  // decode's staging
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t next_ticket_ = 1;
  std::vector<void*> old_pinned_;
  std::vector<uint8_t> host_tmp_;
  Status err_;
};

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
