// The CUDA backend's memory: the device's pool of pinned packet memory and the backend's arena
// leased from it, the stream-ordered pool and device buffers, alloc_f32's arrays, and the copies
// between host and device memory (queued when the host side is pinned, through the bounce buffer
// otherwise).
#include "src/backend/cuda/cuda_backend_impl.h"

#if SKETCHCCL_HAVE_CUDA
#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace sketchccl::backend::cuda_impl {

namespace {

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

}  // namespace

namespace {

// Pinned blocks for the pool: portable, so that a block serves any device's copies.
class PinnedSource final : public BlockSource {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void release(void* p, size_t) override {
    cudaFreeHost(p);
    cudaGetLastError();
  }
};

std::unique_ptr<BlockSource> make_pinned_source(int) {
  return std::make_unique<PinnedSource>();
}

}  // namespace

// Nothing kept is freed when a lease comes back (max_kept 0): leases come back on the proxy,
// and cudaFreeHost may synchronize the device while the gate holds a stream. Trims free it: the
// last backend of the device going, ncclCommSuspend.
MemoryPool& pinned_packet_pool(int device) {
  return process_pool(PoolKind::kPinnedPackets, device, 0, 0, make_pinned_source);
}

void* CudaBackendImpl::alloc_packets(size_t bytes) {
  if (void* p = arena_.alloc(bytes)) return p;
  return std::aligned_alloc(64, (bytes + 255) & ~size_t(255));  // beyond the arena: plain memory
}

void CudaBackendImpl::free_packets(void* p) {
  if (p != nullptr && !arena_.free(p)) std::free(p);
}

Status CudaBackendImpl::reserve_packet_memory(size_t bytes) {
  // On the caller's thread: a fresh block is allocated under this backend's device, then the
  // caller's is put back.
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  SCCL_CUDA_RETURN(cudaSetDevice(dev_), "cudaSetDevice");
  Status st = arena_.reserve(bytes);
  if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
  if (!st.ok()) {
    return Status(Code::kUnhandledCudaError, "CUDA backend: cudaHostAlloc: " + st.message());
  }
  return Status::Ok();
}

Backend::MemoryFigures CudaBackendImpl::memory_figures() const {
  MemoryFigures f;
  f.packet_leased_bytes = arena_.leased_bytes();
  f.packet_peak_bytes = arena_.peak_bytes();
  f.packet_misses = arena_.misses();
  f.pinned_bytes = f.packet_leased_bytes + small_.cap + bounce_.cap;
  // The backend's own pool keeps what it frees (release threshold: never), so what it reserves
  // is what this communicator holds of the device.
  uint64_t reserved = 0;
  if (pool_ != nullptr &&
      cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess) {
    f.device_bytes = reserved;
  } else {
    cudaGetLastError();
  }
  return f;
}

void CudaBackendImpl::free_f32(void* base) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (cudaSetDevice(dev_) == cudaSuccess) cudaFreeAsync(base, stream_);
  if (prev >= 0 && prev != dev_) cudaSetDevice(prev);
  cudaGetLastError();
}

Status CudaBackendImpl::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return Status::Ok();
  SCCL_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                   "device copy");
  SCCL_RETURN_IF_ERROR(sync(stream_, "device copy"));
  return Status::Ok();
}

Status CudaBackendImpl::pin(PinBuf* b, size_t bytes) {
  void* p = nullptr;
  SCCL_CUDA_RETURN(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  b->p = static_cast<uint8_t*>(p);
  b->cap = bytes;
  return Status::Ok();
}

Status CudaBackendImpl::make_pool() {
  int supported = 0;
  SCCL_CUDA_RETURN(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, dev_),
                   "cudaDeviceGetAttribute(MemoryPoolsSupported)");
  if (supported == 0) {
    return errorf(Code::kUnhandledCudaError,
                  "CUDA backend: device %d does not support memory pools (cudaMallocAsync)", dev_);
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev_;
  SCCL_CUDA_RETURN(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
  int off = 0;
  SCCL_CUDA_RETURN(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &off),
                   "cudaMemPoolSetAttribute(ReuseAllowInternalDependencies)");
  uint64_t keep = UINT64_MAX;
  SCCL_CUDA_RETURN(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep),
                   "cudaMemPoolSetAttribute(ReleaseThreshold)");
  return Status::Ok();
}

bool CudaBackendImpl::pinned(const void* p, size_t bytes) {
  const uint8_t* q = static_cast<const uint8_t*>(p);
  auto within = [&](const PinBuf& b) {
    return b.p != nullptr && q >= b.p && q + bytes <= b.p + b.cap;
  };
  return within(small_) || within(bounce_) || arena_.contains(p, bytes);
}

Status CudaBackendImpl::to_host(void* dst, const void* src, size_t bytes, cudaStream_t s,
                                const char* what) {
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

Status CudaBackendImpl::to_device(void* dst, const void* src, size_t bytes, cudaStream_t s,
                                  const char* what) {
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

Status CudaBackendImpl::to_device_bits(const uint64_t* bits, size_t n) {
  const size_t bytes = kernels::bitmap_bytes(n);
  SCCL_RETURN_IF_ERROR(ensure(bits_, bytes));
  return to_device(bits_.p, bits, bytes, stream_, "bitmap to device");
}

Status CudaBackendImpl::ensure(DevBuf& b, size_t bytes, cudaStream_t stream) {
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

// Stream-ordered like the backend's own buffers (from the backend's pool: never synchronizes the
// device, which a gated stream may be waiting on), zeroed on the stream.
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

}  // namespace sketchccl::backend::cuda_impl

#endif  // SKETCHCCL_HAVE_CUDA
