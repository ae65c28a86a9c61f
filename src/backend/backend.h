// Where codec work runs. The ring engine (src/coll) calls a Backend, made by make_backend for the
// memory type of the call's buffers: the host backend runs the kernels' CPU build on host memory,
// a host call's buffers or a device call's staged copies (device_staging.h). The ring never calls
// kernels/ directly, and coll sees only this interface. Every call returns a Status; results come
// back through out-parameters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/codec.h"
#include "kernels/error_feedback.h"
#include "src/backend/memory_type.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// An fp32 array in a backend's memory (error feedback's residual and scratch); it must not
// outlive the backend that made it.
class F32Array {
 public:
  virtual ~F32Array() = default;
  float* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  float* data_ = nullptr;
  size_t size_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // The memory its user buffers (x, y) live in.
  virtual MemoryType memory_type() const = 0;

  // Prepares the calling thread (the proxy, once per operation); nothing for the host backend.
  virtual Status activate() { return Status::Ok(); }
  // Bounds every later wait of this backend (the proxy's, once per operation): it gives up past
  // `timeout_s` (SKETCHCCL_TIMEOUT) or once *abort (ncclCommAbort) is true. The host backend
  // never waits.
  virtual void bound_waits(const std::atomic<bool>* abort, double timeout_s) {
    (void)abort;
    (void)timeout_s;
  }
  // After a failed operation: returns once no work of this backend can still write the call's
  // buffers (bounded like the other waits); an error when that could not be seen, and then the
  // communicator must fail. The host backend's work is done when its calls return.
  virtual Status quiesce() { return Status::Ok(); }
  // dst = src, `bytes` of this backend's memory (a one-rank AllReduce); same or disjoint ranges.
  virtual Status copy(void* dst, const void* src, size_t bytes) {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
    return Status::Ok();
  }

  // Memory this backend holds, for the statistics (docs/memory.md).
  struct MemoryFigures {
    uint64_t pinned_bytes = 0;         // pinned host memory held now (0 on the host backend)
    uint64_t packet_leased_bytes = 0;  // packet memory leased from the process's pools now
    uint64_t packet_peak_bytes = 0;    // the most packet memory it leased at once
    uint64_t device_bytes = 0;         // device memory it holds (0 on the host backend)
    uint64_t packet_misses = 0;        // 0: packet memory is plain host memory
  };
  virtual MemoryFigures memory_figures() const { return MemoryFigures{}; }

  // The codec contract (kernels/codec.h) on this backend's memory.
  virtual size_t packet_bytes(const kernels::CodecParams& p, size_t n) const = 0;
  virtual Status encode(const kernels::CodecParams& p, const void* x, kernels::ElemType t, size_t n,
                        void* pkt, size_t cap) = 0;
  virtual Status step(const kernels::CodecParams& p, const void* in, size_t in_bytes, const void* x,
                      kernels::ElemType t, size_t n, void* out, size_t cap) = 0;
  virtual Status decode(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y,
                        kernels::ElemType t, size_t n, float scale,
                        kernels::DecodeStats* stats) = 0;

  // Asynchronous encode / step (the contract of coll::SliceOps::encode_start): the work may
  // still run when these return with *ticket != 0; `pkt` / `out` are valid once test(ticket)
  // reports done, and until then `x`, `in` and `pkt` / `out` must stay as they are. The
  // defaults run at once (the host backend).
  virtual Status encode_start(const kernels::CodecParams& p, const void* x, kernels::ElemType t,
                              size_t n, void* pkt, size_t cap, uint64_t* ticket) {
    *ticket = 0;
    return encode(p, x, t, n, pkt, cap);
  }
  virtual Status step_start(const kernels::CodecParams& p, const void* in, size_t in_bytes,
                            const void* x, kernels::ElemType t, size_t n, void* out, size_t cap,
                            uint64_t* ticket) {
    *ticket = 0;
    return step(p, in, in_bytes, x, t, n, out, cap);
  }
  // Asynchronous decode: `y` and `*stats` are valid once test(ticket) reports done, and `pkt`
  // must stay as it is until then. The default runs at once.
  virtual Status decode_start(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y,
                              kernels::ElemType t, size_t n, float scale,
                              kernels::DecodeStats* stats, uint64_t* ticket) {
    *ticket = 0;
    return decode(p, pkt, bytes, y, t, n, scale, stats);
  }
  virtual Status test(uint64_t ticket, bool* done) {
    (void)ticket;
    *done = true;
    return Status::Ok();
  }

  // Host memory for packets (coll::SliceOps::alloc_packets): plain by default; the host backend
  // leases it from the process's host packet pool (memory_pool.h).
  virtual void* alloc_packets(size_t bytes) {
    return std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  }
  virtual void free_packets(void* p) { std::free(p); }

  // Error feedback (kernels/error_feedback.h), on this backend's memory: x is a user buffer,
  // the fp32 arrays come from alloc_f32. The arithmetic is the kernels' one SCCL_HD source, so
  // the residuals are the same bits on every backend (the sums' order may differ).
  // n floats, zeroed in the backend's order (its later calls see zeros).
  virtual Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) = 0;
  virtual Status ef_compensate(const void* x, kernels::ElemType t, size_t n, const float* residual,
                               float* out) = 0;
  virtual Status ef_update(const float* comp, const float* in, const float* out, size_t n,
                           float* residual, kernels::EfSums* sums) = 0;

  // The two-shot scheme's fp32 sums (kernels/sum.h) in this backend's memory (alloc_f32 arrays);
  // a backend without them (sums() false) has its calls run the ring. sum[n] = float(x[n]);
  // sum[n] += decode(pkt); y[n] = T(sum[n] * scale). The same bits on every backend.
  virtual bool sums() const { return false; }
  // a[n] = 0, an alloc_f32 array, in the backend's order.
  virtual Status zero_f32(float* a, size_t n) {
    if (n != 0) std::memset(a, 0, n * sizeof(float));
    return Status::Ok();
  }
  virtual Status load_sum(const void* x, kernels::ElemType t, size_t n, float* sum) {
    (void)x, (void)t, (void)n, (void)sum;
    return Status(Code::kInternalError, "this backend keeps no fp32 sums");
  }
  virtual Status decode_add(const kernels::CodecParams& p, const void* pkt, size_t bytes,
                            float* sum, size_t n) {
    (void)p, (void)pkt, (void)bytes, (void)sum, (void)n;
    return Status(Code::kInternalError, "this backend keeps no fp32 sums");
  }
  virtual Status store_sum(const float* sum, size_t n, float scale, void* y, kernels::ElemType t) {
    (void)sum, (void)n, (void)scale, (void)y, (void)t;
    return Status(Code::kInternalError, "this backend keeps no fp32 sums");
  }

  // The lossless sparse codec's phases (kernels/sparse.h). Counts come back through `*count`
  // (popcount: required; compact / scatter: the values read or written, optional).
  virtual Status bitmap_build(const void* x, kernels::ElemType t, size_t n, uint64_t* bits) = 0;
  virtual Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) = 0;
  virtual Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) = 0;
  virtual Status sparse_compact(const uint64_t* bits, size_t n, const void* x, kernels::ElemType t,
                                float* out, size_t* count) = 0;
  virtual Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale,
                                void* y, kernels::ElemType t, size_t* count) = 0;
};

// Host memory, the kernels' CPU build, the calling thread.
std::unique_ptr<Backend> make_host_backend();

// The backend for buffers of memory type `mem`: the host backend for kHost; kInternalError for
// kDevice (a device call reaches the engine as its staged host copies, device_staging.h).
Status make_backend(MemoryType mem, int device, std::unique_ptr<Backend>* out);

}  // namespace sketchccl::backend
