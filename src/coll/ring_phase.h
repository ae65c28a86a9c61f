// The ring phases: the phase field of every tag (ring.cc) keeps the rings inside one operation,
// and the membership exchanges, from matching each other's messages. One list, so that no two
// rings of an operation ever share a number (checked below); the numbers are on the wire, so
// they never change.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sketchccl::coll {

// The rings of a taken-over reduction whose phase depends on its ring shape (coll_shape.h): a
// codec plan names them by stage, the shape numbers them.
enum class Stage : uint8_t {
  kData = 0,     // the codec's ring over the call's elements
  kSupport = 1,  // `sparse` 1: the OR-allreduce of the non-zero bitmaps (support_encoding.h)
  kValues = 2,   // `sparse` 2: the exact ring of the values on the union support
};
constexpr size_t kStages = 3;

// Each shape's phase of each stage, in Stage order.
inline constexpr uint8_t kAllReducePhases[kStages] = {0, 1, 2};
inline constexpr uint8_t kReduceScatterPhases[kStages] = {4, 5, 6};

// The phases every shape shares, and those outside the reductions.
enum RingPhase : uint8_t {
  kPhaseAccuracySample = 3,  // the accuracy estimate's exact side reduction (accuracy.h)
  kPhaseHierScatter = 7,     // hierarchical AllReduce 1: the exact reduce-scatter in a node
  kPhaseHierGather = 8,      // hierarchical AllReduce 3: the exact all-gather in a node
  kPhaseExactColl =
      9,  // the exact collectives (src/standalone/exact_collectives.h): op field = op_seq
  kPhaseP2P =
      10,  // send/recv (src/standalone/exact_collectives.h): op field = the pair's message count
  kPhaseDecision = 11,       // a reduction's agreement on its codec decision (reduction_engine.cc)
  kPhaseS2Repair = 12,       // s2's exact ring of the positions that did not peel (s2_repair.h)
  kPhaseS2RepairCnt = 13,    // s2 without the whole result: each rank's count of such positions
  kPhaseS2RepairPos = 14,    // s2 without the whole result: the positions themselves
  kPhaseMembership = 15,     // Communicator's small all-gathers (split)
  kPhaseSparseIndices = 16,  // `sparse` 1 as index lists (support_encoding.h)
  // The two-shot schedule's data (two_shot.h): an AllReduce's all-to-all of contributions and
  // its all-gather of the reduced packets; a ReduceScatter's all-to-all.
  kPhaseTwoShotScatter = 17,
  kPhaseTwoShotGather = 18,
  kPhaseTwoShotScatterRs = 19,
  // A two-shot ReduceScatter's second round: each chunk owner's tally of the accuracy sample at
  // its chunk to every rank (call_sample.h).
  kPhaseAccuracyTally = 20,
  kPhaseLinkProbe = 21,  // the link probe at join (link_probe.h)
  // The compressed AllGather's packets, each rank's to every other (allgather.h): step field =
  // the packet's owner, slice field = its slice.
  kPhaseCompressedGather = 22,
  // The node-aware AllGather's exact exchange inside a node (allgather.h): step field = the
  // sender's local index, slice field = node · slices per shard + slice.
  kPhaseGatherNode = 23,
};

namespace detail {
inline constexpr uint8_t kSharedPhases[] = {kPhaseAccuracySample,
                                            kPhaseHierScatter,
                                            kPhaseHierGather,
                                            kPhaseExactColl,
                                            kPhaseP2P,
                                            kPhaseDecision,
                                            kPhaseS2Repair,
                                            kPhaseS2RepairCnt,
                                            kPhaseS2RepairPos,
                                            kPhaseMembership,
                                            kPhaseSparseIndices,
                                            kPhaseTwoShotScatter,
                                            kPhaseTwoShotGather,
                                            kPhaseTwoShotScatterRs,
                                            kPhaseAccuracyTally,
                                            kPhaseLinkProbe,
                                            kPhaseCompressedGather,
                                            kPhaseGatherNode};
constexpr bool phases_distinct() {
  uint32_t seen = 0;  // the tag's phase field has 5 bits
  auto take = [&seen](uint8_t p) {
    if (p >= 32 || ((seen >> p) & 1u) != 0) return false;
    seen |= uint32_t(1) << p;
    return true;
  };
  for (uint8_t p : kSharedPhases) {
    if (!take(p)) return false;
  }
  for (uint8_t p : kAllReducePhases) {
    if (!take(p)) return false;
  }
  for (uint8_t p : kReduceScatterPhases) {
    if (!take(p)) return false;
  }
  return true;
}
static_assert(phases_distinct(), "ring phases: every number once, below 32 (5 tag bits)");
}  // namespace detail

}  // namespace sketchccl::coll
