// A staged device call's slice operations (docs/cuda.md, "Chunks"): the engine's own, wrapped so
// that the call's input is waited for chunk by chunk and its result released chunk by chunk.
// Before an operation first reads this rank's input at [offset, offset + n) it asks the gate
// (StageGate::need_input: the stream has copied those bytes) and fills the accuracy sample there;
// once a decode or a store of the output has completed, it tells the gate those bytes are final
// (StageGate::output_final), so the stream copies them back while the call goes on. Only for
// plans whose input is read and whose output is written through the slice operations alone, each
// output element once (CodecPlan::streams).
#pragma once

#include <cstddef>
#include <vector>

#include "src/backend/stage_gate.h"
#include "src/coll/call_sample.h"
#include "src/coll/ring.h"

namespace sketchccl::coll {

class GatedSliceOps final : public SliceOps {
 public:
  // `esz`: the element's bytes; `out_first`: the element of the output's first (a
  // ReduceScatter's chunk); `sample`: filled as the input arrives (null: none); `outputs`: say
  // when the output is final (false where the call may run again: a speculative one).
  GatedSliceOps(SliceOps& inner, backend::StageGate& gate, size_t esz, size_t out_first,
                CallSample* sample, bool outputs);

  size_t packet_bytes(size_t offset, size_t n) const override {
    return inner_.packet_bytes(offset, n);
  }
  Status encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) override;
  Status step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes, void* out,
              size_t cap) override;
  Status encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                      uint64_t* ticket) override;
  Status step_start(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                    void* out, size_t cap, uint64_t* ticket) override;
  Status test(uint64_t ticket, bool* done) override { return inner_.test(ticket, done); }
  Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) override;
  Status flush(bool* done) override;
  void* alloc_packets(size_t bytes) override { return inner_.alloc_packets(bytes); }
  void free_packets(void* p) override { inner_.free_packets(p); }

  bool sums() const override { return inner_.sums(); }
  Status sum_scratch(size_t n, float** sum) override { return inner_.sum_scratch(n, sum); }
  Status zero_sum(float* sum, size_t n) override { return inner_.zero_sum(sum, n); }
  Status load_own(size_t offset, size_t n, float* sum) override;
  Status decode_add(size_t offset, size_t n, int ring_step, const void* pkt, size_t bytes,
                    float* sum) override {
    return inner_.decode_add(offset, n, ring_step, pkt, bytes, sum);
  }
  Status encode_sum(size_t offset, size_t n, int ring_step, const float* sum, void* pkt,
                    size_t cap) override {
    return inner_.encode_sum(offset, n, ring_step, sum, pkt, cap);
  }
  Status store_sum(size_t offset, size_t n, const float* sum) override;

 private:
  // The input at [offset, offset + n) is copied in (and the sample there taken).
  Status need(size_t offset, size_t n);
  // The output elements [offset, offset + n) of the element space are final.
  void final(size_t offset, size_t n);
  // Decodes started whose output is not yet said final: final once the inner flush is done.
  Status settle();

  SliceOps& inner_;
  backend::StageGate& gate_;
  const size_t esz_;
  const size_t out_first_;
  CallSample* sample_;
  const bool outputs_;
  struct Range {
    size_t offset, n;
  };
  std::vector<Range> decoding_;
};

}  // namespace sketchccl::coll
