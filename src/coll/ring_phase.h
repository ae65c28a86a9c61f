// The ring phases: the phase field of every tag (ring.cc) keeps the rings inside one operation,
// and the membership exchanges, from matching each other's messages. One list, so that no two
// rings of an operation ever share a number.
#pragma once

#include <cstdint>

namespace sketchccl::coll {

enum RingPhase : uint8_t {
  kPhaseCodec = 0,           // an AllReduce's codec ring
  kPhaseSparseBitmap = 1,    // AllReduce `sparse` 1: the OR-allreduce of the bitmaps
  kPhaseSparseValues = 2,    // AllReduce `sparse` 2: the exact ring of the union values
  kPhaseAccuracySample = 3,  // the accuracy estimate's exact side reduction (accuracy.h)
  kPhaseScatterCodec = 4,    // a ReduceScatter's codec reduce-scatter
  kPhaseScatterBitmap = 5,   // ReduceScatter `sparse` 1: the OR-allreduce of the bitmaps
  kPhaseScatterValues = 6,   // ReduceScatter `sparse` 2: reduce-scatter of the union values
  kPhaseHierScatter = 7,     // hierarchical AllReduce 1: the exact reduce-scatter in a node
  kPhaseHierGather = 8,      // hierarchical AllReduce 3: the exact all-gather in a node
  kPhaseExactColl = 9,       // the exact collectives (collectives.h): op field = op_seq
  kPhaseP2P = 10,            // send/recv (collectives.h): op field = the pair's message count
  kPhaseDecision = 11,       // an AllReduce's agreement on its codec decision (allreduce.cc)
  kPhaseS2Repair = 12,       // s2's exact ring of the positions that did not peel (s2_repair.h)
  kPhaseS2RepairCnt = 13,    // ReduceScatter s2: each rank's count of such positions
  kPhaseS2RepairPos = 14,    // ReduceScatter s2: the positions themselves
  kPhaseMembership = 15,     // Communicator's small all-gathers (split)
  kPhaseSparseIndices = 16,  // `sparse` 1 as index lists (support_encoding.h)
};

}  // namespace sketchccl::coll
