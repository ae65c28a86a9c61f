// The CUDA backend's memory: the pinned packet arena, the stream-ordered pool and device
// buffers, alloc_f32's arrays, and the copies between host and device memory (queued when the
// host side is pinned, through the bounce buffer otherwise).
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

void* CudaBackendImpl::alloc_packets(size_t bytes) {
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

void CudaBackendImpl::free_packets(void* p) {
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

Status CudaBackendImpl::reserve_packet_memory(size_t bytes) {
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
  if (within(small_) || within(bounce_)) return true;
  std::lock_guard<std::mutex> lock(arena_mu_);
  if (within(arena_.block)) return true;
  for (const PinBuf& r : retired_) {
    if (within(r)) return true;
  }
  return false;
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
