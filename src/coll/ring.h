// The compressed ring (docs/engine.md), generic over what a packet is.
// Reduce-scatter (an encode, then P-1 fused steps), all-gather (P-1 steps forwarding the
// reduced packets), then every rank decodes every packet (ring.cc names each step). Slices are
// pipelined: up to `depth` slice lanes are in flight, so transfers of one lane overlap the codec
// work of another. The ring is a shape only (which packet goes where, and the codec work
// between): its transfers, waits, size checks, abort and timeout errors and the close on failure
// are the Exchange's (exchange.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "src/coll/exchange.h"
#include "src/core/config.h"
#include "src/core/status.h"
#include "transport/transport.h"

namespace sketchccl::coll {

// How a buffer of `count` elements is cut: P chunks, each cut into slices of at most
// `slice_elems` elements. With `align` > 1 every chunk and slice starts at a multiple of `align`
// elements (chunks differ by at most `align` elements; slice_elems is rounded up to a multiple):
// the AllReduce uses kRingChunkAlign, so the codec kernels take their 16-byte paths. The cut
// depends only on (count, nranks, slice_elems), so every rank agrees on it. align 1 is the even
// cut (sizes differ by at most one element), which a ReduceScatter's fixed chunks need.
constexpr size_t kRingChunkAlign = 64;
class RingPlan {
 public:
  RingPlan(size_t count, int nranks, size_t slice_elems, size_t align = 1);
  // Chunk c is [bounds[c], bounds[c + 1]) (nranks + 1 ascending offsets, the last one count).
  RingPlan(std::vector<size_t> bounds, size_t slice_elems);
  size_t chunk_offset(int c) const;
  size_t chunk_len(int c) const { return chunk_offset(c + 1) - chunk_offset(c); }
  int slices(int c) const;  // 0 for an empty chunk
  int max_slices() const { return max_slices_; }
  // Element range of slice j of chunk c; n = 0 when it does not exist.
  void slice(int c, int j, size_t* offset, size_t* n) const;

 private:
  size_t count_;
  int nranks_;
  size_t slice_elems_;
  size_t align_ = 1;
  int max_slices_;
  std::vector<size_t> bounds_;  // empty: the even cut
};

// What the ring needs from a codec, per slice [offset, offset + n) of the element space.
// Implementations read this rank's input and write its output; the ring moves the packets.
// ring_step: the ring step that produces the packet (0 for encode), for the codec's RNG streams.
class SliceOps {
 public:
  virtual ~SliceOps() = default;
  virtual size_t packet_bytes(size_t offset, size_t n) const = 0;
  virtual Status encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) = 0;
  // The received partial sum `in` plus this rank's slice, as a packet in `out` (the codec's
  // fused step).
  virtual Status step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                      void* out, size_t cap) = 0;

  // Asynchronous forms, for backends whose codec work runs elsewhere (a GPU): they start the
  // work and set *ticket (0: already complete); the output packet is valid once test(ticket)
  // reports done, after which the ticket is spent. Until then the ring leaves `in` and `out`
  // alone. It keeps at most one ticket per slice lane and polls it between transfers, so the
  // proxy thread never waits for the device. The defaults run at once.
  virtual Status encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                              uint64_t* ticket) {
    *ticket = 0;
    return encode(offset, n, ring_step, pkt, cap);
  }
  virtual Status step_start(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                            void* out, size_t cap, uint64_t* ticket) {
    *ticket = 0;
    return step(offset, n, ring_step, in, in_bytes, out, cap);
  }
  // done: the work of `ticket` is complete (its error, if any, is returned then).
  virtual Status test(uint64_t ticket, bool* done) {
    (void)ticket;
    *done = true;
    return Status::Ok();
  }

  // Starts decoding a final packet into this rank's output; the work may go on (a backend's
  // asynchronous decode) until flush reports it done, and reads `pkt` until then.
  virtual Status decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) = 0;
  // Collects work that decode_start left running without waiting; *done once none is left. The
  // ring polls it after the last decode and before its packet memory goes (also after a
  // failure), within SKETCHCCL_TIMEOUT and the abort flag.
  virtual Status flush(bool* done) {
    *done = true;
    return Status::Ok();
  }

  // Memory for every packet the ring sends, receives or hands to encode, step or decode_start
  // (null when out of memory). The default is plain host memory, 64-byte aligned.
  virtual void* alloc_packets(size_t bytes) {
    return std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  }
  virtual void free_packets(void* p) { std::free(p); }

  // The two-shot scheme's operations (two_shot.h) on fp32 sums in the memory of the call's
  // buffers (the backend's): where every contribution is quantized once and summed at full
  // precision. The defaults refuse, so a SliceOps without them runs the ring (sums() is false).
  virtual bool sums() const { return false; }
  // *sum = at least n floats of that memory, for the call (reused: contents unspecified).
  virtual Status sum_scratch(size_t n, float** sum) {
    (void)n, (void)sum;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
  // sum[n] = 0.
  virtual Status zero_sum(float* sum, size_t n) {
    (void)sum, (void)n;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
  // sum[n] = this rank's own slice of the input, in fp32 (the owner's contribution, exact).
  virtual Status load_own(size_t offset, size_t n, float* sum) {
    (void)offset, (void)n, (void)sum;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
  // sum[n] += the decoded packet `pkt` of another rank's contribution, made by encode at
  // `ring_step`.
  virtual Status decode_add(size_t offset, size_t n, int ring_step, const void* pkt, size_t bytes,
                            float* sum) {
    (void)offset, (void)n, (void)ring_step, (void)pkt, (void)bytes, (void)sum;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
  // The reduced slice's packet: the codec over sum[n] (the owner's one requantization).
  virtual Status encode_sum(size_t offset, size_t n, int ring_step, const float* sum, void* pkt,
                            size_t cap) {
    (void)offset, (void)n, (void)ring_step, (void)sum, (void)pkt, (void)cap;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
  // This rank's output at the slice = sum[n] (scaled, in the output's type): a ReduceScatter's
  // chunk, never quantized again.
  virtual Status store_sum(size_t offset, size_t n, const float* sum) {
    (void)offset, (void)n, (void)sum;
    return Status(Code::kInternalError, "two-shot: these slice operations keep no sums");
  }
};

struct RingStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t sample_bytes_sent = 0;  // the accuracy sample carried in the packets' messages
};

// The accuracy sample (call_sample.h) carried in a schedule's own messages instead of a side ring:
// the sampled positions of the call's `count` elements, this rank's input at them, and where the
// call leaves their exact sums (both in sample order): every position's, the same bits on every
// rank (an AllReduce), or those of this rank's own chunk (a ReduceScatter).
struct SampleCarry {
  const uint64_t* bits = nullptr;  // count bits
  const float* own = nullptr;      // m values
  float* exact = nullptr;          // m values
  size_t m = 0;
};

// Runs the whole ring over `count` elements. count == 0 does nothing; nranks == 1 encodes and
// decodes locally (so every rank, even alone, sees the codec's result).
Status ring_allreduce(const CommLink& link, size_t count, size_t slice_elems, int depth,
                      SliceOps& ops, RingStats* stats);

// The reduce-scatter half alone, with NCCL's layout: P-1 steps after which rank r holds chunk r
// reduced, and decodes that chunk only (decode_start sees only its offsets). `bounds`: the chunks'
// offsets (RingPlan's second form), else the even cut (NCCL's ReduceScatter: P equal chunks).
Status ring_reduce_scatter(const CommLink& link, size_t count, size_t slice_elems, int depth,
                           SliceOps& ops, RingStats* stats,
                           const std::vector<size_t>* bounds = nullptr);

// All-gather of `bytes` per rank around the ring (P - 1 steps of tiny messages, tags of
// link.op_seq and link.phase): `all` gets rank r's block at r * bytes. For agreement exchanges
// (membership, per-call decisions), not for data.
Status ring_allgather_small(const CommLink& link, const void* mine, size_t bytes, void* all);

// The chunk that ring step `step` (0 .. 2P-2; the reduce-scatter alone: 0 .. P-1) of `rank` works
// on: it receives that chunk's packet (all but step 0) and sends it (all but the last step, and
// the reduce-scatter's P-1, whose chunk is the rank's own). Transfer i is step i's send and step
// i + 1's receive, tagged ring_tag(.., i, slice). The device path's ring program
// (device_ring.h) runs the same steps.
int ring_step_chunk(int step, int rank, int nranks, bool scatter);

// The limits of a ring's tags: ranks, and slices per chunk.
constexpr int kRingMaxRanks = 1 << 11;
constexpr int kRingMaxSlices = (1 << 19) - 1;

// Tag of one transfer: operation, phase, ring step, slice; below 2^kRingTagBits.
constexpr int kRingTagBits = 44;
uint64_t ring_tag(uint32_t op_seq, uint8_t phase, int step, int slice);

}  // namespace sketchccl::coll
