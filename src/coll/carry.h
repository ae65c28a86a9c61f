// The accuracy sample as a trailer of a shape's data messages (docs/engine.md, "The accuracy
// guard"): the sampled positions of a call (SampleCarry) that fall in each slice of a chunk
// travel behind that slice's packet, 4 bytes each (fp32, in sample order), so that the exact sums
// need no side ring. A transfer-layer facility beside the Exchange: which sample positions fall in
// a slice, where the trailer lies in a message, and the copies in and out. Any shape whose
// messages carry slices of a RingPlan can carry it (two-shot does; a ring or the AllGather could).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/ring.h"
#include "src/core/status.h"

namespace sketchccl::coll {

class SampleTrailer {
 public:
  // The trailer's bytes for at most `n` sampled elements: a bound for messages of unknown layout.
  static constexpr size_t max_bytes(size_t n) { return 4 * n; }

  // Places the sample's positions in the slices of `plan` (every chunk, every slice). Fails where
  // the slices do not follow each other in element order or do not hold exactly the sample's m
  // positions (the shape's cut is not the sample's elements).
  Status place(const SampleCarry& sample, const RingPlan& plan, int nranks);

  // Slice j of chunk c: how many sampled positions it holds, and the first one's index in the
  // sample (0, 0 before place()).
  size_t count(int c, int j) const { return count_.empty() ? 0 : count_[idx(c, j)]; }
  size_t first(int c, int j) const { return first_.empty() ? 0 : first_[idx(c, j)]; }
  // A message of slice j of chunk c: its packet of `packet_bytes`, then the trailer (none for an
  // empty slice).
  size_t message_bytes(size_t packet_bytes, int c, int j) const {
    return packet_bytes == 0 ? 0 : packet_bytes + 4 * count(c, j);
  }
  // Copies the slice's values from `values` (count(c, j) floats) behind the packet in `msg`.
  void put(int c, int j, const float* values, uint8_t* msg, size_t packet_bytes) const;
  // Copies the slice's values from behind the packet in `msg` into `values` (count(c, j) floats).
  void get(int c, int j, const uint8_t* msg, size_t packet_bytes, float* values) const;

 private:
  size_t idx(int c, int j) const {
    return static_cast<size_t>(c) * static_cast<size_t>(slices_) + static_cast<size_t>(j);
  }
  int slices_ = 0;
  std::vector<size_t> first_, count_;  // per (chunk, slice)
};

}  // namespace sketchccl::coll
