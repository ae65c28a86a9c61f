// Where codec work runs. The ring engine (src/coll) calls a Backend; the host backend runs the
// kernels' CPU build on host memory; the CUDA backend runs their CUDA build on device buffers
// and stages packets. The ring never calls kernels/ directly. Every call returns a Status;
// results come back through out-parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/status.h"
#include "kernels/codec.h"

namespace sketchccl::backend {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

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

  // Host memory for packets (coll::SliceOps::alloc_packets): plain by default; the CUDA backend
  // gives pinned memory, which its copies reach without staging and without the host waiting.
  virtual void* alloc_packets(size_t bytes) {
    return std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  }
  virtual void free_packets(void* p) { std::free(p); }

  // fp32 views of user buffers (error feedback).
  virtual Status load_f32(const void* x, kernels::ElemType t, size_t n, float* out) = 0;

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

}  // namespace sketchccl::backend
