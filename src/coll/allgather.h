// The compressed AllGather (docs/allgather.md), a shape on the transfer layer (exchange.h): each
// rank encodes its own shard once with a linear codec, slice by slice, sends the same packets to
// every other rank, and every rank -- the owner too -- decodes every rank's packets into its
// place of the output. Every rank decodes the same bytes with the same parameters, so every rank
// holds the same bits, and the error is one encoding's, whatever the number of ranks.
//
// On several nodes of several ranks (SKETCHCCL_HIERARCHY=auto) it is node-aware: compressed
// only between nodes, exact inside each (node_aware_allgather).
//
// Direct, not around the ring: each rank sends its P - 1 copies itself, so a rank's bytes are the
// ring's ((P - 1) shards), with one hop of latency instead of P - 1 and no forwarding on the
// proxy; the transport connects every peer on first use (CommLink::addresses), as two-shot does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/coll/exchange.h"
#include "src/coll/stats.h"
#include "src/coll/topology.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// A compressed AllGather as the api submits it (host buffers): `count` elements of this rank's
// shard in `send`; `recv` gets rank r's shard at r * count (NCCL's layout; in place is
// send == recv + rank * count).
struct GatherArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  kernels::ElemType type = kernels::ElemType::kF32;
  kernels::CodecId codec = kernels::CodecId::kQ8;  // a linear codec (gather_codec_usable)
  // Where owner q's shard goes in recv, in shards (null: at q); the node-aware gather's rail.
  const std::vector<int>* place = nullptr;
  // Where owner q's shard lies in the whole gathered output, in shards, which keys the codec's
  // parameters (null: as place); the rail's gather alone, whose packets are then the node-aware
  // gather's.
  const std::vector<int>* key_place = nullptr;
};

// The codecs the AllGather runs: the linear family (casts and blockwise quantizers), whose packet
// decodes alone; `none` is the exact engine's.
constexpr bool gather_codec_usable(kernels::CodecId id) {
  const kernels::CodecInfo* c = kernels::codec_info(id);
  return c != nullptr && c->family == kernels::CodecFamily::kLinear &&
         id != kernels::CodecId::kNone;
}
// Ok, or why `codec` cannot run an AllGather (`what` names where it was asked for).
Status check_gather_codec(kernels::CodecId codec, const char* what);

// The settings the shape reads (coll/settings.h).
struct GatherSettings {
  uint64_t seed = 0;       // SKETCHCCL_SEED
  size_t slice_elems = 1;  // SKETCHCCL_SLICE_BYTES / 4
};

// Runs the AllGather among the link's ranks on phase kPhaseCompressedGather; its bytes and time
// go to *stats (its call counted also when it fails), those to `peers_on_other_nodes` of the
// link's ranks (-1: every peer) as inter-node bytes. `be` runs the codec on host buffers.
Status compressed_allgather(const CommLink& link, backend::Backend& be, const GatherArgs& args,
                            const GatherSettings& settings, GatherStats* stats,
                            int peers_on_other_nodes = -1);

// The node-aware AllGather on several nodes of several ranks (topo.hierarchical()): 1, the
// compressed gather among this rank's rail (one rank per node), each decoded shard written at
// its owner's place; 2, the node's exact exchange (kPhaseGatherNode) of those N shards between
// its L ranks. Every shard is decoded, identically, by the N ranks of its owner's rail and copied
// as it is inside each node: every rank holds the same bits, and only phase 1 crosses nodes.
Status node_aware_allgather(const CommLink& link, const Topology& topo, backend::Backend& be,
                            const GatherArgs& args, const GatherSettings& settings,
                            GatherStats* stats);

// The rail's compressed gather alone, in front of NCCL (whose AllGather on the node's communicator
// runs the node's part): among this rank's rail (one rank per node), recv gets the shard of the
// rail's rank on node n at n * count (N shards, the same bits on every rank of the rail: the
// node-aware gather's, its packets keyed by the owners' places alike); every byte it sends
// crosses nodes.
Status rail_allgather(const CommLink& link, const Topology& topo, backend::Backend& be,
                      const GatherArgs& args, const GatherSettings& settings, GatherStats* stats);

}  // namespace sketchccl::coll
