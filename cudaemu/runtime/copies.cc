// cudaMemcpy / cudaMemset: bounds-checked, queued in stream order, with the host-side
// synchronization CUDA documents for pageable and page-locked memory.
#include <cstdio>
#include <cstring>
#include <vector>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

using namespace cudaemu;

namespace {

enum class Mem { kDevice, kPinned, kPageable };

Mem classify(const void* p) {
  if (in_device_region(p)) return Mem::kDevice;
  HostRange h;
  return find_host_range(p, &h) ? Mem::kPinned : Mem::kPageable;
}

// A device-side range: inside a live device allocation or a page-locked (mapped) host range.
bool device_side_ok(const void* p, size_t n) {
  return device_range_ok(p, n);
}

// At run time: a device side in a VMM mapping the device has no access to is a device fault,
// as the copy engine's on a GPU.
void check_device_access(const void* p, size_t n, const char* what) {
  if (!device_access_denied(p, n)) return;
  char msg[160];
  std::snprintf(msg, sizeof msg,
                "%s of %zu bytes at %p: a VMM mapping without device access (cuMemSetAccess)", what,
                n, p);
  device_fault(cudaErrorIllegalAddress, msg);
}

// A host-side range: not device memory (a device pointer there is an invalid argument).
bool host_side_ok(const void* p, Mem m) {
  return p != nullptr && m != Mem::kDevice;
}

struct CopyPlan {
  Mem dst, src;
  const char* what;
  cudaError_t error = cudaSuccess;
};

CopyPlan plan_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  CopyPlan p{classify(dst), classify(src), "memcpy"};
  bool dst_dev = false, src_dev = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      dst_dev = true;
      break;
    case cudaMemcpyDeviceToHost:
      src_dev = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_dev = src_dev = true;
      break;
    case cudaMemcpyDefault:
      // Unified addressing: the pointers say where they are.
      dst_dev = p.dst == Mem::kDevice;
      src_dev = p.src == Mem::kDevice;
      break;
    default:
      p.error = cudaErrorInvalidValue;
      return p;
  }
  if (n == 0) return p;
  const bool ok = (dst_dev ? device_side_ok(dst, n) : host_side_ok(dst, p.dst)) &&
                  (src_dev ? device_side_ok(src, n) : host_side_ok(src, p.src));
  if (!ok) p.error = cudaErrorInvalidValue;
  static const char* names[2][2] = {{"memcpy H2H", "memcpy D2H"}, {"memcpy H2D", "memcpy D2D"}};
  p.what = names[dst_dev ? 1 : 0][src_dev ? 1 : 0];
  if (dst_dev) p.dst = Mem::kDevice;
  if (src_dev) p.src = Mem::kDevice;
  return p;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                 bool sync_call) {
  cudaError_t e = api_enter(sync_call ? "cudaMemcpy" : "cudaMemcpyAsync");
  if (e != cudaSuccess) return e;
  const CopyPlan p = plan_copy(dst, src, n, kind);
  if (p.error != cudaSuccess) return ret(p.error);
  const bool pageable = p.dst == Mem::kPageable || p.src == Mem::kPageable;
  if (sync_call) {
    e = capture_unsafe_call("cudaMemcpy");
    if (e != cudaSuccess) return ret(e);
  }
  if (pageable)
    hazard_lock_call(sync_call ? "cudaMemcpy (pageable)" : "cudaMemcpyAsync (pageable)");
  if (n == 0) return cudaSuccess;
  const bool host_dst = p.dst != Mem::kDevice;
  const bool host_src = p.src != Mem::kDevice;
  // From pageable memory to the device, asynchronously: staged at once, DMA'd in stream order.
  if (!sync_call && p.src == Mem::kPageable && !host_dst) {
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
    return submit(
        stream, p.what,
        [dst, staged, what = p.what] {
          check_device_access(dst, staged->size(), what);
          std::memcpy(dst, staged->data(), staged->size());
        },
        true);
  }
  ItemPtr item;
  e = submit(
      sync_call ? nullptr : stream, p.what,
      [dst, src, n, host_dst, host_src, what = p.what] {
        if (!host_dst) check_device_access(dst, n, what);
        if (!host_src) check_device_access(src, n, what);
        std::memmove(dst, src, n);
      },
      true, &item);
  if (e != cudaSuccess) return e;
  // The caller waits: every synchronous copy touching the host (cudaMemcpy returns once done),
  // and asynchronous copies to pageable memory or between host buffers.
  const bool wait = sync_call ? (host_dst || host_src)
                              : (p.dst == Mem::kPageable || (host_dst && host_src && pageable));
  if (wait) {
    wait_done(item);
    return ret(sticky_error());
  }
  return cudaSuccess;
}

cudaError_t set(void* dst, int value, size_t n, cudaStream_t stream, bool sync_call) {
  cudaError_t e = api_enter(sync_call ? "cudaMemset" : "cudaMemsetAsync");
  if (e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  if (!device_range_ok(dst, n)) return ret(cudaErrorInvalidValue);
  if (sync_call) {
    e = capture_unsafe_call("cudaMemset");
    if (e != cudaSuccess) return ret(e);
  }
  ItemPtr item;
  e = submit(
      sync_call ? nullptr : stream, "memset",
      [dst, value, n] {
        check_device_access(dst, n, "memset");
        std::memset(dst, value, n);
      },
      true, &item);
  if (e != cudaSuccess) return e;
  // A synchronous memset of page-locked host memory is synchronous; of device memory it is not.
  if (sync_call && !in_device_region(dst)) wait_done(item);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, n, kind, stream, false);
}

cudaError_t cudaMemset(void* dst, int value, size_t n) {
  return set(dst, value, n, nullptr, true);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  return set(dst, value, n, stream, false);
}

}  // extern "C"
