#include "src/coll/stats.h"

#include <cstdio>

namespace sketchccl::coll {

namespace {

void append_pool(std::string* out, const char* name, const backend::PoolFigures& f) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "\"%s\": {\"held_bytes\": %llu, \"leased_bytes\": %llu, "
      "\"peak_held_bytes\": %llu, \"leases\": %llu, \"reuses\": %llu, "
      "\"trimmed_bytes\": %llu, \"users\": %llu}",
      name, static_cast<unsigned long long>(f.held_bytes),
      static_cast<unsigned long long>(f.leased_bytes),
      static_cast<unsigned long long>(f.peak_held_bytes), static_cast<unsigned long long>(f.leases),
      static_cast<unsigned long long>(f.reuses), static_cast<unsigned long long>(f.trimmed_bytes),
      static_cast<unsigned long long>(f.users));
  *out += buf;
}

// `, "memory": {...}`: the communicator's packet memory and the process's pools.
void append_memory(std::string* out, const CommStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ", \"memory\": {\"packet_leased_bytes\": %llu, \"packet_peak_bytes\": %llu, "
                "\"packet_misses\": %llu, \"process\": {",
                static_cast<unsigned long long>(s.packet_leased_bytes),
                static_cast<unsigned long long>(s.packet_peak_bytes),
                static_cast<unsigned long long>(s.packet_misses));
  *out += buf;
  append_pool(out, "host_packets", s.process_host_packets);
  *out += ", ";
  append_pool(out, "pinned_staging", s.process_pinned_packets);
  *out += "}}";
}

}  // namespace

std::string CommStats::to_json(int rank, int nranks, uint64_t comm_id) const {
  std::string out;
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"comm\": \"%016llx\", \"rank\": %d, \"nranks\": %d, \"calls_taken\": %llu, "
      "\"calls_forwarded\": %llu, \"calls_failed\": %llu, \"nodes\": %d, "
      "\"ranks_per_node\": %d, \"hierarchical\": %s, \"decisions_disagreed\": %llu, "
      "\"calls_forwarded_no_gain\": %llu, \"calls_exact_no_gain\": %llu, "
      "\"link_gbps\": %.6g, \"link_latency_us\": %.6g, "
      "\"device_bytes\": %llu, \"pinned_bytes\": %llu, \"suspended\": %s, "
      "\"proxy_cuda_calls\": %llu",
      static_cast<unsigned long long>(comm_id), rank, nranks,
      static_cast<unsigned long long>(calls_taken),
      static_cast<unsigned long long>(calls_forwarded),
      static_cast<unsigned long long>(calls_failed), nodes, ranks_per_node,
      hierarchical ? "true" : "false", static_cast<unsigned long long>(decisions_disagreed),
      static_cast<unsigned long long>(calls_forwarded_no_gain),
      static_cast<unsigned long long>(calls_exact_no_gain), link_gbps, link_latency_us,
      static_cast<unsigned long long>(device_bytes), static_cast<unsigned long long>(pinned_bytes),
      suspended ? "true" : "false", static_cast<unsigned long long>(proxy_cuda_calls));
  out += buf;
  append_memory(&out, *this);
  out += ", \"codecs\": {";
  bool first = true;
  for (const auto& [name, c] : by_codec) {
    const double wire_ratio = c.bytes_in ? static_cast<double>(c.bytes_sent) / c.bytes_in : 0;
    const uint64_t s2_total = c.s2_peeled + c.s2_estimated;
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\": {\"calls\": %llu, \"bytes_in\": %llu, \"bytes_sent\": %llu, "
                  "\"bytes_received\": %llu, \"intra_node_bytes_sent\": %llu, "
                  "\"inter_node_bytes_sent\": %llu, \"wire_per_input_byte\": %.6g, "
                  "\"seconds\": %.6f",
                  first ? "" : ", ", name.c_str(), static_cast<unsigned long long>(c.calls),
                  static_cast<unsigned long long>(c.bytes_in),
                  static_cast<unsigned long long>(c.bytes_sent),
                  static_cast<unsigned long long>(c.bytes_received),
                  static_cast<unsigned long long>(c.intra_node_bytes_sent),
                  static_cast<unsigned long long>(c.inter_node_bytes_sent), wire_ratio, c.seconds);
    out += buf;
    if (c.two_shot_calls > 0) {
      std::snprintf(buf, sizeof buf, ", \"two_shot_calls\": %llu",
                    static_cast<unsigned long long>(c.two_shot_calls));
      out += buf;
    }
    if (s2_total > 0 || c.s2_nonzeros > 0) {
      std::snprintf(buf, sizeof buf,
                    ", \"s2_nonzeros\": %llu, \"s2_peeled\": %llu, \"s2_estimated\": %llu, "
                    "\"s2_peel_rate\": %.6f, \"s2_repaired\": %llu, "
                    "\"s2_repair_bytes_sent\": %llu",
                    static_cast<unsigned long long>(c.s2_nonzeros),
                    static_cast<unsigned long long>(c.s2_peeled),
                    static_cast<unsigned long long>(c.s2_estimated),
                    s2_total ? static_cast<double>(c.s2_peeled) / s2_total : 1.0,
                    static_cast<unsigned long long>(c.s2_repaired),
                    static_cast<unsigned long long>(c.s2_repair_bytes_sent));
      out += buf;
    }
    if (c.support_calls[0] + c.support_calls[1] + c.support_calls[2] > 0) {
      std::snprintf(buf, sizeof buf,
                    ", \"support\": {\"element_bitmap\": %llu, \"row_bitmap\": %llu, "
                    "\"index_list\": %llu, \"index_overflows\": %llu, \"bytes_sent\": %llu}",
                    static_cast<unsigned long long>(c.support_calls[0]),
                    static_cast<unsigned long long>(c.support_calls[1]),
                    static_cast<unsigned long long>(c.support_calls[2]),
                    static_cast<unsigned long long>(c.support_index_overflows),
                    static_cast<unsigned long long>(c.support_bytes_sent));
      out += buf;
    }
    if (c.ef_input_sq > 0) {
      std::snprintf(buf, sizeof buf, ", \"local_nmse\": %.6g", c.ef_residual_sq / c.ef_input_sq);
      out += buf;
    }
    if (c.estimated_calls > 0) {
      const double n = static_cast<double>(c.estimated_calls);
      std::snprintf(buf, sizeof buf,
                    ", \"estimated_nmse\": {\"mean\": %.6g, \"worst\": %.6g}, "
                    "\"estimated_maxrel\": {\"mean\": %.6g, \"worst\": %.6g}, "
                    "\"estimated_calls\": %llu, \"sample_bytes_sent\": %llu, "
                    "\"guard_steps\": %llu",
                    c.estimated_nmse_sum / n, c.estimated_nmse_worst, c.estimated_maxrel_sum / n,
                    c.estimated_maxrel_worst, static_cast<unsigned long long>(c.estimated_calls),
                    static_cast<unsigned long long>(c.sample_bytes_sent),
                    static_cast<unsigned long long>(c.guard_steps));
      out += buf;
    }
    out += "}";
    first = false;
  }
  out += "}";
  if (allgather.calls > 0) {
    const GatherStats& g = allgather;
    std::snprintf(
        buf, sizeof buf,
        ", \"allgather\": {\"calls\": %llu, \"failed\": %llu, \"bytes_in\": %llu, "
        "\"bytes_sent\": %llu, \"bytes_received\": %llu, \"inter_node_bytes_sent\": %llu, "
        "\"seconds\": %.6f}",
        static_cast<unsigned long long>(g.calls), static_cast<unsigned long long>(g.failed),
        static_cast<unsigned long long>(g.bytes_in), static_cast<unsigned long long>(g.bytes_sent),
        static_cast<unsigned long long>(g.bytes_received),
        static_cast<unsigned long long>(g.inter_node_bytes_sent), g.seconds);
    out += buf;
  }
  out += "}";
  return out;
}

}  // namespace sketchccl::coll
