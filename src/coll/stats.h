// Per-communicator statistics, written as JSON to SKETCHCCL_STATS_FILE at destroy and exit.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "src/backend/memory_pool.h"

namespace sketchccl::coll {

struct CodecStats {
  uint64_t calls = 0;
  uint64_t two_shot_calls = 0;  // of those, scheduled two-shot (schedule_choice.h)
  uint64_t bytes_in = 0;        // user bytes reduced (count * element size)
  uint64_t bytes_sent = 0;      // bytes this rank put on the wire
  uint64_t bytes_received = 0;
  // bytes_sent split by where the bytes went: to a rank of this node or of another node.
  uint64_t intra_node_bytes_sent = 0;
  uint64_t inter_node_bytes_sent = 0;
  double seconds = 0;
  uint64_t s2_nonzeros = 0;   // positions set in the merged bitmaps
  uint64_t s2_peeled = 0;     // recovered exactly by peeling
  uint64_t s2_estimated = 0;  // left to the median estimate

  // Of those, reduced exactly afterwards (SKETCHCCL_S2_REPAIR), and the bytes this rank sent
  // for it (also in bytes_sent).
  uint64_t s2_repaired = 0;
  uint64_t s2_repair_bytes_sent = 0;

  double ef_input_sq = 0;     // error feedback: sum of squares of what was compressed
  double ef_residual_sq = 0;  //   and of the residual kept: their ratio is the codec's NMSE
  // The accuracy guard's estimates (coll/accuracy.h), identical on every rank.
  uint64_t estimated_calls = 0;
  double estimated_nmse_sum = 0, estimated_nmse_worst = 0;
  double estimated_maxrel_sum = 0, estimated_maxrel_worst = 0;
  uint64_t sample_bytes_sent = 0;  // the sample: side ring or carried (not in bytes_sent)
  uint64_t guard_steps = 0;        // buffers stepped up to a safer codec after a call here
  // `sparse` phase 1 (coll/support_encoding.h): calls per encoding that agreed the support
  // (element bitmap, row bitmap, index list), index lists that overflowed (the element bitmap
  // ran after them), and phase 1's bytes (in bytes_sent too).
  uint64_t support_calls[3] = {0, 0, 0};
  uint64_t support_index_overflows = 0;
  uint64_t support_bytes_sent = 0;
};

// The compressed AllGathers (allgather.h); the exact ones are not counted here.
struct GatherStats {
  uint64_t calls = 0;
  uint64_t failed = 0;      // of those, failed
  uint64_t bytes_in = 0;    // this rank's shards (count * element size): the exact ring sends
                            // (P - 1) times as much
  uint64_t bytes_sent = 0;  // bytes this rank put on the wire
  uint64_t bytes_received = 0;
  uint64_t inter_node_bytes_sent = 0;  // of bytes_sent, to ranks of other nodes
  double seconds = 0;
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
