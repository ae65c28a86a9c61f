// The hierarchical AllReduce (docs/hierarchy.md): an exact reduce-scatter among the ranks of a
// node, a compressed AllReduce of each rank's shard among the ranks of its rail (the same local
// index on every node), then an exact all-gather in the node. Only the middle phase crosses
// nodes. The hierarchical ReduceScatter: the input's chunks regrouped by rail, an exact
// reduce-scatter in the node of each rail's chunks, then a compressed ReduceScatter along the
// rail. It composes a flat engine over the rail's sub-transport (its own ReductionEngine of N
// ranks); neither that engine nor the ring knows of nodes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/coll/exchange.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/ring.h"
#include "src/coll/settings.h"
#include "src/coll/stats.h"
#include "src/coll/topology.h"
#include "transport/transport.h"

namespace sketchccl::coll {

// The ranks `members` of a transport as ranks 0 .. members.size() - 1 of a sub-ring.
class SubTransport : public transport::Transport {
 public:
  SubTransport(transport::Transport* inner, const std::vector<int>& members)
      : inner_(inner), members_(members) {}
  const char* name() const override { return inner_->name(); }
  transport::TransportProperties properties() const override { return inner_->properties(); }
  transport::Blob address() const override { return inner_->address(); }
  Status connect(int peer, const transport::Blob& address) override {
    return inner_->connect(members_[static_cast<size_t>(peer)], address);
  }
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::RequestId* id) override {
    return inner_->isend(members_[static_cast<size_t>(peer)], tag, buf, bytes, id);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, transport::RequestId* id) override {
    return inner_->irecv(members_[static_cast<size_t>(peer)], tag, buf, bytes, id);
  }
  Status progress() override { return inner_->progress(); }
  // The inner transport's waiting, so that a rail ring or a node phase over sockets sleeps in the
  // transport as the flat ring does instead of polling.
  bool can_block() const override { return inner_->can_block(); }
  Status wait_for_events(double max_s) override { return inner_->wait_for_events(max_s); }
  transport::LinkReport link_report(int peer) const override {
    return inner_->link_report(members_[static_cast<size_t>(peer)]);
  }
  Status test(transport::RequestId id, bool* done, size_t* bytes) override {
    return inner_->test(id, done, bytes);
  }
  void close() override { inner_->close(); }

 private:
  transport::Transport* inner_;
  const std::vector<int>& members_;
};

// The hierarchical ReduceScatter's shape: NCCL's input holds P chunks of recvcount, chunk g for
// global rank g. Regrouped, local index l's rail's chunks lie together at [l·N, (l+1)·N) in rail
// order (by node), so that the node's reduce-scatter of the regrouped buffer leaves local rank l
// the node's sums of its rail's N chunks, and the rail's ReduceScatter of those leaves rail rank n
// (global rank chunk_of(l, n)) its own chunk. Any uniform placement, node by node or not.
class RailChunks {
 public:
  explicit RailChunks(const Topology& topo);
  int nodes() const { return nodes_; }
  int local_ranks() const { return local_ranks_; }
  // The input chunk at position `pos` of the regrouped buffer (l·N + n): the global rank at
  // node n with local index l.
  int chunk_at(int pos) const { return grid_[static_cast<size_t>(pos)]; }
  int chunk_of(int local, int node) const { return chunk_at(local * nodes_ + node); }
  // Whether node n's ranks are n·L .. n·L + L - 1 in local order (the usual launcher numbering):
  // then each node's chunks lie together in the input, and a node's reduce-scatter of them needs
  // no regroup copy.
  bool blocks_by_node() const;

 private:
  int nodes_ = 1, local_ranks_ = 1;
  std::vector<int> grid_;
};

class HierarchicalReduction {
 public:
  HierarchicalReduction(const Settings& settings, const Topology& topo);

  // Host buffers of an AllReduce or a ReduceScatter, a device call's staged copies included (the
  // rail kinds are run_rail's).
  static bool takes(const ReductionArgs& args) {
    return (args.kind == CallKind::kAllReduce || args.kind == CallKind::kReduceScatter) &&
           args.mem == backend::MemoryType::kHost;
  }
  // `link` is the communicator's (global ranks); `stats` its statistics, to which this call's
  // bytes are added per codec, split into intra- and inter-node bytes.
  Status run(const CommLink& link, const ReductionArgs& args, CommStats* stats);
  // The inter-node phase alone (a real NCCL runs the intra-node phases), of any memory type;
  // ncclAvg divides by N here (NCCL's ReduceScatter divided by L). kRail: the AllReduce of this
  // rank's shard, args.send == args.recv; kRailReduceScatter: the ReduceScatter of the node's sums
  // of this rank's rail's N chunks (args.count of them), into this rank's chunk args.recv.
  Status run_rail(const CommLink& link, const ReductionArgs& args, CommStats* stats);
  const RailChunks& rail_chunks() const { return chunks_; }
  ReductionEngine& rail() { return rail_; }

 private:
  // The node phases of one AllReduce (hierarchy.cc): its segments, buffers and node link.
  class NodePhases;
  // The AllReduce's segments through the three phases, pipelined; *codec: the rail's codec.
  Status run_segments(NodePhases* node, const CommLink& rail, CommStats* stats, std::string* codec);
  // Phase 2 of segment k: its shard's compressed AllReduce along the rail.
  Status reduce_shard(NodePhases* node, size_t k, const CommLink& rail, CommStats* stats,
                      std::string* codec);
  // The ReduceScatter (args.kind kReduceScatter, host buffers).
  Status run_reduce_scatter(const CommLink& link, const ReductionArgs& args, CommStats* stats);

  Settings settings_;
  Topology topo_;
  RailChunks chunks_;
  CommLink rail_link(const CommLink& link, transport::Transport* rail_transport);
  // The rail's ranks' addresses in rail order (a two-shot rail connects to every one).
  std::vector<transport::Blob> rail_addresses_;
  // Adds the rail engine's statistics since the last call to `stats` (as inter-node bytes) and
  // returns the codec the rail used.
  // count_calls: the rail's calls count as calls (else the caller counts one per user call).
  std::string fold_rail_stats(CommStats* stats, bool count_calls);

  ReductionEngine rail_;  // the compressed middle phase among the N ranks of this rail
  // Per user buffer: this rank's shards of its segments in fp32, the rail engine's buffers (so
  // their history and error feedback stay per user buffer and segment).
  std::map<BufferKey, std::vector<float>> shards_;
  // Per user buffer of a ReduceScatter: the node's fp32 sums of this rank's rail's N chunks.
  std::map<BufferKey, std::vector<float>> rail_inputs_;
};

}  // namespace sketchccl::coll
