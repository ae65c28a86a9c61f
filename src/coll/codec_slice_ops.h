// The kernels' codec over one call's buffers, slice by slice: the SliceOps a codec plan hands to
// its ring shape (codec_plan.h). Each slice's CodecParams come from where it lies (offset key,
// ring step, s2's counters), the same on every rank, so every rank builds the same packets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/coll/ring.h"
#include "src/coll/s2_repair.h"
#include "src/coll/settings.h"

namespace sketchccl::coll {

// Where a ring's slice operations read this rank's input and write its output.
struct SliceBuffers {
  const void* send = nullptr;  // the input, element 0 of the ring's element space
  void* recv = nullptr;        // the output: input element `recv_first` is its first
  size_t recv_first = 0;
  kernels::ElemType type = kernels::ElemType::kF32;
};

class CodecSliceOps : public SliceOps {
 public:
  // `scale` multiplies the decoded values (1/P for ncclAvg).
  CodecSliceOps(backend::Backend& be, const kernels::CodecParams& base, const SliceBuffers& buf,
                float scale);

  // s2: each slice's counters per row from (offset, n), and the decodes' reports into `log`
  // (with the unresolved positions when it wants them).
  void set_s2(S2DecodeLog* log, std::function<uint32_t(size_t offset, size_t n)> counters);

  size_t packet_bytes(size_t offset, size_t n) const override;
  Status encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) override;
  Status step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes, void* out,
              size_t cap) override;
  // Asynchronous where the backend allows (a GPU's stream).
  Status encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                      uint64_t* ticket) override;
  Status step_start(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                    void* out, size_t cap, uint64_t* ticket) override;
  Status test(uint64_t ticket, bool* done) override { return be_.test(ticket, done); }
  // Asynchronous where the backend allows: the ring goes on while the device decodes, and
  // flush() collects every result once the ring is done.
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override;
  Status flush(bool* done) override;
  void* alloc_packets(size_t bytes) override { return be_.alloc_packets(bytes); }
  void free_packets(void* p) override { be_.free_packets(p); }

  // The two-shot scheme's sums, where the backend keeps them (in its memory, alloc_f32).
  bool sums() const override { return be_.sums(); }
  Status sum_scratch(size_t n, float** sum) override;
  Status zero_sum(float* sum, size_t n) override { return be_.zero_f32(sum, n); }
  Status load_own(size_t offset, size_t n, float* sum) override;
  Status decode_add(size_t offset, size_t n, int ring_step, const void* pkt, size_t bytes,
                    float* sum) override;
  Status encode_sum(size_t offset, size_t n, int ring_step, const float* sum, void* pkt,
                    size_t cap) override;
  Status store_sum(size_t offset, size_t n, const float* sum) override;

  // What the decodes learned, once flushed.
  const kernels::DecodeStats& decode_stats() const { return stats_; }

  // For what wraps these operations (error_feedback.h): the slice's parameters, the backend, and
  // this rank's input at an offset.
  kernels::CodecParams params(size_t offset, size_t n, uint32_t ring_step) const;
  backend::Backend& backend() { return be_; }
  const void* input(size_t offset) const { return send_ + offset * esz_; }
  kernels::ElemType type() const { return type_; }

 private:
  struct PendingDecode {
    uint64_t ticket = 0;
    size_t offset = 0, n = 0;
    kernels::DecodeStats stats;
    std::vector<uint64_t> unresolved;  // s2 with a log that wants them: the slice's bitmap
  };
  // Takes the results of the decodes that have finished, oldest first (they finish in order),
  // without waiting; returns the first error, naming the decode's elements.
  Status reap();
  void add_stats(const PendingDecode& d);

  backend::Backend& be_;
  kernels::CodecParams base_;
  const uint8_t* send_;
  uint8_t* recv_;
  size_t recv_first_;
  kernels::ElemType type_;
  size_t esz_;
  float scale_;
  kernels::DecodeStats stats_;
  std::deque<PendingDecode> decodes_;  // stable addresses: the backend writes their stats
  S2DecodeLog* s2_log_ = nullptr;
  std::function<uint32_t(size_t, size_t)> s2_counters_;
  std::unique_ptr<backend::F32Array> sum_;  // sum_scratch's, in the backend's memory
};

// An exact fp32 AllReduce of m host values on ring phase `phase` (the accuracy estimate's side
// ring, s2's repair): a `none` ring on the host backend `host`.
Status exact_sum_ring(const CommLink& link, uint8_t phase, backend::Backend& host,
                      const Settings& settings, const float* vals, float* sums, size_t m,
                      RingStats* stats);

}  // namespace sketchccl::coll
