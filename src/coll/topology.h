// Which ranks share a node (docs/hierarchy.md). Every rank's node id is all-gathered at join,
// so every rank computes the same Topology from the same table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sketchccl::coll {

// This process's node id: a hash of SKETCHCCL_HOSTID, else NCCL_HOSTID, else the hostname and
// the boot id (/proc/sys/kernel/random/boot_id), as NCCL does. *source says which, for logs.
uint64_t local_host_id(std::string* source = nullptr);
// A hash of the boot id alone: processes that share it share one machine's cores, whatever
// SKETCHCCL_HOSTID says of their node.
uint64_t machine_id();

struct Topology {
  int nranks = 1;
  int nodes = 1;                // N, numbered in the order of their lowest rank
  int local_ranks = 1;          // L: ranks per node when uniform, else this rank's node's count
  bool uniform = true;          // every node holds the same number of ranks
  int node = 0;                 // this rank's node
  int local = 0;                // this rank's index among its node's ranks (ordered by rank)
  std::vector<int> node_of;     // per rank: its node
  std::vector<int> node_ranks;  // the ranks of this node, by local index
  std::vector<int> rail_ranks;  // uniform: the ranks of this local index, by node

  // Exact inside a node, compressed between nodes: several nodes of several ranks, all alike.
  bool hierarchical() const { return uniform && nodes > 1 && local_ranks > 1; }
  // "2 nodes x 2 ranks", "3 nodes, unequal (1 to 3 ranks)".
  std::string describe() const;
};

// The topology seen from `rank`, host_ids[r] being rank r's node id.
Topology make_topology(int rank, const std::vector<uint64_t>& host_ids);

}  // namespace sketchccl::coll
