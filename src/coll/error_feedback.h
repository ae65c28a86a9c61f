// Error feedback (SKETCHCCL_ERROR_FEEDBACK, docs/engine.md): a rank keeps, per buffer, the part
// of its own contribution that compression lost, and adds it to the next call. It wraps any codec
// plan whose ring runs the codec over the user's buffers (codec_slice_ops.h); the plan says which
// kind of residual it keeps.
#pragma once

#include <cstddef>
#include <memory>

#include "src/backend/backend.h"
#include "src/coll/buffer_states.h"
#include "src/coll/codec_slice_ops.h"
#include "src/coll/stats.h"

namespace sketchccl::coll {

enum class Feedback {
  kNone,     // exact, or nothing this rank alone could put back
  kPerStep,  // every encode and step this rank runs keeps the error that it added
  // The steps are exact and the error arises at decode (lossy s2): the compensated input is kept
  // through the ring, then the plan keeps it where the output lost it (s2_lossy_feedback).
  kAtDecode,
};

// The residual of `state`'s buffer, `count` floats of backend `be`: its own generation's, or a
// fresh zero one (never another generation's: a buffer dropped and seen again starts afresh).
Status buffer_residual(backend::Backend& be, size_t count, BufferState* state, float** residual);

// The ring's slice operations with the residual applied: each compresses x + residual and keeps
// what it lost. Synchronous (each result is needed at once); decodes and packets are `inner`'s.
class FeedbackSliceOps : public SliceOps {
 public:
  FeedbackSliceOps(CodecSliceOps& inner, float* residual, Feedback kind, CodecStats* cs)
      : inner_(inner), be_(inner.backend()), residual_(residual), kind_(kind), cs_(cs) {}

  size_t packet_bytes(size_t offset, size_t n) const override {
    return inner_.packet_bytes(offset, n);
  }
  Status encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) override;
  Status step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes, void* out,
              size_t cap) override;
  Status test(uint64_t ticket, bool* done) override { return inner_.test(ticket, done); }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override {
    return inner_.decode_start(offset, n, pkt, bytes);
  }
  Status flush(bool* done) override { return inner_.flush(done); }
  void* alloc_packets(size_t bytes) override { return inner_.alloc_packets(bytes); }
  void free_packets(void* p) override { inner_.free_packets(p); }

  // Two-shot: encode (above) keeps what this rank's contribution lost; the owner's own
  // contribution is summed exact (its residual is spent), and its one requantization of the sum
  // is kept in its residual, so the next call's sum puts it back.
  bool sums() const override { return inner_.sums(); }
  Status sum_scratch(size_t n, float** sum) override { return inner_.sum_scratch(n, sum); }
  Status zero_sum(float* sum, size_t n) override { return inner_.zero_sum(sum, n); }
  Status load_own(size_t offset, size_t n, float* sum) override;
  Status decode_add(size_t offset, size_t n, int ring_step, const void* pkt, size_t bytes,
                    float* sum) override {
    return inner_.decode_add(offset, n, ring_step, pkt, bytes, sum);
  }
  Status encode_sum(size_t offset, size_t n, int ring_step, const float* sum, void* pkt,
                    size_t cap) override;
  Status store_sum(size_t offset, size_t n, const float* sum) override {
    return inner_.store_sum(offset, n, sum);
  }

 private:
  // Error feedback's arrays are the backend's memory (host memory, for a device call's staged
  // copy too): the slices, residuals and decoded values never leave it.
  Status scratch(std::unique_ptr<backend::F32Array>* a, size_t n);
  // x + residual for this slice, in fp32.
  Status compensated(size_t offset, size_t n, float** x);
  // kAtDecode: residual = the compensated input x (NaN/Inf dropped) until the ring's end.
  Status keep_input(size_t offset, size_t n, const float* x);
  // residual = (in + x) - out, NaN/Inf dropped (kernels/error_feedback.h).
  Status keep_residual(size_t offset, size_t n, const float* x, const float* out, const float* in);

  CodecSliceOps& inner_;
  backend::Backend& be_;
  float* residual_;
  Feedback kind_;
  CodecStats* cs_;
  std::unique_ptr<backend::F32Array> comp_, tmp_, tmp_in_, zeros_;
};

}  // namespace sketchccl::coll
