// The exported statistics query (sketchccl/sketchccl.h): a copy of the communicator's counters.
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>

#include <sketchccl/sketchccl.h>
#include "src/api/runtime.h"
#include "src/coll/stats.h"

namespace sketchccl::api {
namespace {

void fill(const coll::Communicator& comm, sketchcclCommStats* out) {
  const coll::CommStats s = comm.stats();
  out->rank = comm.rank();
  out->nranks = comm.nranks();
  out->calls_taken = s.calls_taken;
  out->calls_forwarded = s.calls_forwarded;
  out->calls_failed = s.calls_failed;
  out->calls_forwarded_no_gain = s.calls_forwarded_no_gain;
  out->calls_exact_no_gain = s.calls_exact_no_gain;
  out->link_gbps = s.link_gbps;
  out->link_latency_us = s.link_latency_us;
  out->device_bytes = s.device_bytes;
  out->pinned_bytes = s.pinned_bytes;
  out->suspended = s.suspended ? 1 : 0;
  out->packet_leased_bytes = s.packet_leased_bytes;
  out->packet_peak_bytes = s.packet_peak_bytes;
  out->process_host_packet_bytes = s.process_host_packets.held_bytes;
  out->process_host_packet_peak_bytes = s.process_host_packets.peak_held_bytes;
  out->process_pinned_packet_bytes = s.process_pinned_packets.held_bytes;
  out->process_pinned_packet_peak_bytes = s.process_pinned_packets.peak_held_bytes;
  out->process_packet_leases = s.process_host_packets.leases + s.process_pinned_packets.leases;
  out->process_packet_reuses = s.process_host_packets.reuses + s.process_pinned_packets.reuses;
  out->packet_misses = s.packet_misses;
  out->proxy_cuda_calls = s.proxy_cuda_calls;
  out->allgather_calls = s.allgather.calls;
  out->allgather_failed = s.allgather.failed;
  out->allgather_bytes_in = s.allgather.bytes_in;
  out->allgather_bytes_sent = s.allgather.bytes_sent;
  out->allgather_bytes_received = s.allgather.bytes_received;
  out->allgather_seconds = s.allgather.seconds;
  out->allgather_inter_node_bytes_sent = s.allgather.inter_node_bytes_sent;
  for (const auto& [name, c] : s.by_codec) {
    out->bytes_in += c.bytes_in;
    out->bytes_sent += c.bytes_sent;
    out->bytes_received += c.bytes_received;
    out->seconds += c.seconds;
    if (out->num_codecs == SKETCHCCL_STATS_MAX_CODECS) continue;  // totals still count it
    sketchcclCodecAccuracy& a = out->accuracy[out->num_codecs];
    sketchcclCodecStats& e = out->codecs[out->num_codecs++];
    std::snprintf(e.name, sizeof e.name, "%s", name.c_str());
    e.calls = c.calls;
    e.bytes_in = c.bytes_in;
    e.bytes_sent = c.bytes_sent;
    e.bytes_received = c.bytes_received;
    e.seconds = c.seconds;
    e.s2_nonzeros = c.s2_nonzeros;
    e.s2_peeled = c.s2_peeled;
    e.s2_estimated = c.s2_estimated;
    out->s2_repaired[out->num_codecs - 1] = c.s2_repaired;
    e.ef_input_sq = c.ef_input_sq;
    e.ef_residual_sq = c.ef_residual_sq;
    a.estimated_calls = c.estimated_calls;
    if (c.estimated_calls > 0) {
      a.estimated_nmse_mean = c.estimated_nmse_sum / static_cast<double>(c.estimated_calls);
      a.estimated_maxrel_mean = c.estimated_maxrel_sum / static_cast<double>(c.estimated_calls);
    }
    a.estimated_nmse_worst = c.estimated_nmse_worst;
    a.estimated_maxrel_worst = c.estimated_maxrel_worst;
    a.sample_bytes_sent = c.sample_bytes_sent;
    a.guard_steps = c.guard_steps;
  }
}

}  // namespace
}  // namespace sketchccl::api

extern "C" int sketchcclCommGetStats(struct ncclComm* comm, sketchcclCommStats* out) {
  using namespace sketchccl::api;
  if (comm == nullptr || out == nullptr || out->size < sizeof(size_t)) return ncclInvalidArgument;
  try {
    std::shared_ptr<sketchccl::coll::Communicator> c = Runtime::get().find(comm);
    if (!c) return ncclInvalidArgument;
    sketchcclCommStats full;
    std::memset(&full, 0, sizeof full);
    fill(*c, &full);
    // An older caller's struct is a prefix of ours: fill what it has, whole codec entries only.
    const size_t n = std::min(out->size, sizeof full);
    const size_t entries_fit =
        n <= offsetof(sketchcclCommStats, codecs)
            ? 0
            : (n - offsetof(sketchcclCommStats, codecs)) / sizeof(sketchcclCodecStats);
    full.num_codecs = static_cast<int>(std::min<size_t>(full.num_codecs, entries_fit));
    full.size = n;
    std::memcpy(out, &full, n);
    return ncclSuccess;
  } catch (...) {
    return ncclInternalError;
  }
}
