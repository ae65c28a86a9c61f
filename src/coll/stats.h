// Per-communicator statistics, written as JSON to SKETCHCCL_STATS_FILE at destroy and exit.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "src/backend/memory_pool.h"

namespace sketchccl::coll {

// The types of codec_stats.def's `type` column.
namespace stat_types {
using U64 = uint64_t;
using F64 = double;
using U64x3 = std::array<uint64_t, 3>;
}  // namespace stat_types

// A codec's share of a communicator's calls: the fields of codec_stats.def, all 0 at first.
struct CodecStats {
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  stat_types::type field{};
#include "src/coll/codec_stats.def"
};

// Adds a rail's figures (`from`, hierarchy.cc) into the communicator's, each field as
// codec_stats.def's `fold` column says; calls only where `count_calls`.
void add_codec_stats(const CodecStats& from, CodecStats* to, bool count_calls);

// The compressed AllGathers (allgather.h): the fields of gather_stats.def, all 0 at first; the
// exact ones are not counted here.
struct GatherStats {
#define SCCL_GATHER_STAT(field, type, format, json) stat_types::type field{};
#include "src/coll/gather_stats.def"
};

struct CommStats {
  uint64_t calls_taken = 0;
  uint64_t calls_forwarded = 0;
  uint64_t calls_failed = 0;
  std::map<std::string, CodecStats> by_codec;
  GatherStats allgather;  // compressed AllGathers (not in calls_taken, by_codec)
  // The topology found at join (coll/topology.h): nodes, ranks per node (0: unequal), and
  // whether AllReduces run hierarchically.
  int nodes = 1;
  int ranks_per_node = 0;
  bool hierarchical = false;
  // Calls whose ranks held different histories for their buffer (ran exact; reduction_engine.cc).
  uint64_t decisions_disagreed = 0;
  // auto's verdicts (network_verdict.h): calls forwarded to NCCL, and calls run exact
  // (standalone), because no codec was predicted faster on these links; the agreed link figures
  // (0: not measured).
  uint64_t calls_forwarded_no_gain = 0;
  uint64_t calls_exact_no_gain = 0;
  double link_gbps = 0;
  double link_latency_us = 0;
  // Memory held for this communicator now (docs/memory.md): device bytes (none between calls: a
  // device call is staged in pinned host memory) and the pinned staging blocks of its device calls
  // still in flight or not yet reclaimed; suspended: released by ncclCommSuspend.
  uint64_t device_bytes = 0;
  uint64_t pinned_bytes = 0;
  bool suspended = false;
  // Device runtime calls made on a proxy thread in this process: 0 by design (docs/cuda.md).
  uint64_t proxy_cuda_calls = 0;
  // Device calls whose codecs ran on the caller's stream (the second rung, device_ring.h).
  uint64_t device_codec_calls = 0;
  // Packet memory it leases from the process's pools now (0 between its calls), and the most it
  // leased at once (what it would keep alone, without the pools).
  uint64_t packet_leased_bytes = 0;
  uint64_t packet_peak_bytes = 0;
  // Always 0: packet memory is plain host memory (kept for the public statistics' layout).
  uint64_t packet_misses = 0;
  // The process's pools, shared by all its communicators: host packet memory, and the pinned
  // staging memory of this communicator's device (device_staging.h).
  backend::PoolFigures process_host_packets;
  backend::PoolFigures process_pinned_packets;

  // One JSON object; `rank`, `nranks` and `comm` identify the communicator.
  std::string to_json(int rank, int nranks, uint64_t comm_id) const;
};

}  // namespace sketchccl::coll
