// The exported statistics query (sketchccl/sketchccl.h): a copy of the communicator's counters.
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <type_traits>

#include <sketchccl/sketchccl.h>
#include "src/api/runtime.h"
#include "src/coll/stats.h"

namespace sketchccl::api {
namespace {

// codec_stats.def's `exported` column: where a row goes in the public structs.
#define SCCL_EXPORT_TOTAL_No(field)
#define SCCL_EXPORT_TOTAL_Codec(field)
#define SCCL_EXPORT_TOTAL_CodecTotal(field) out->field += c.field;
#define SCCL_EXPORT_TOTAL_Accuracy(field)
#define SCCL_EXPORT_TOTAL_Appended(field)
#define SCCL_EXPORT_No(field, value)
#define SCCL_EXPORT_Codec(field, value) e.field = value;
#define SCCL_EXPORT_CodecTotal(field, value) e.field = value;
#define SCCL_EXPORT_Accuracy(field, value) a.field = value;
#define SCCL_EXPORT_Appended(field, value) out->field[i] = value;

// The public header cannot include the table: its structs are checked against it here. Every
// exported row is a field of the same name and type (else this does not compile), the entry
// holds nothing else (its size), and sketchcclCodecStats' fields are in the table's order
// (sketchcclCodecAccuracy's are not: its estimated_calls comes first, the JSON's last).
using coll::stat_types::F64;
using coll::stat_types::U64;
template <typename Public, typename Table>
constexpr bool same_type() {
  return std::is_same<Public, Table>::value;
}
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_CHECK_##exported(field, type)
#define SCCL_CODEC_STAT_DERIVED(name, group, json, format, exported, value) \
  SCCL_CHECK_##exported(name, F64)
#define SCCL_CHECK_No(field, type)
#define SCCL_CHECK_Codec(field, type)                                    \
  static_assert(same_type<decltype(sketchcclCodecStats::field), type>(), \
                "sketchccl.h: sketchcclCodecStats." #field               \
                "'s type differs from codec_stats.def");
#define SCCL_CHECK_CodecTotal(field, type)                    \
  SCCL_CHECK_Codec(field, type) static_assert(                \
      same_type<decltype(sketchcclCommStats::field), type>(), \
      "sketchccl.h: sketchcclCommStats." #field "'s type differs from codec_stats.def");
#define SCCL_CHECK_Accuracy(field, type)                                    \
  static_assert(same_type<decltype(sketchcclCodecAccuracy::field), type>(), \
                "sketchccl.h: sketchcclCodecAccuracy." #field               \
                "'s type differs from codec_stats.def");
#define SCCL_CHECK_Appended(field, type)                                                  \
  static_assert(                                                                          \
      same_type<decltype(sketchcclCommStats::field), type[SKETCHCCL_STATS_MAX_CODECS]>(), \
      "sketchccl.h: sketchcclCommStats." #field " is not one per codec entry");
#include "src/coll/codec_stats.def"

// Bytes of the exported rows per struct, and the entry's offsets in table order.
#define SCCL_BYTES_No(type)
#define SCCL_BYTES_Codec(type) +sizeof(type)
#define SCCL_BYTES_CodecTotal(type) +sizeof(type)
#define SCCL_BYTES_Accuracy(type)
#define SCCL_BYTES_Appended(type)
constexpr size_t kCodecEntryBytes = sizeof(sketchcclCodecStats::name)
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_BYTES_##exported(type)
#include "src/coll/codec_stats.def"
    ;
static_assert(sizeof(sketchcclCodecStats) == kCodecEntryBytes,
              "sketchccl.h: sketchcclCodecStats has fields codec_stats.def does not export");
#define SCCL_ACCURACY_BYTES_Accuracy(type) +sizeof(type)
#define SCCL_ACCURACY_BYTES_No(type)
#define SCCL_ACCURACY_BYTES_Codec(type)
#define SCCL_ACCURACY_BYTES_CodecTotal(type)
#define SCCL_ACCURACY_BYTES_Appended(type)
constexpr size_t kAccuracyBytes = 0
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_ACCURACY_BYTES_##exported(type)
#define SCCL_CODEC_STAT_DERIVED(name, group, json, format, exported, value) \
  SCCL_ACCURACY_BYTES_##exported(F64)
#include "src/coll/codec_stats.def"
    ;
static_assert(sizeof(sketchcclCodecAccuracy) == kAccuracyBytes,
              "sketchccl.h: sketchcclCodecAccuracy has fields codec_stats.def does not export");
#define SCCL_OFFSET_No(field)
#define SCCL_OFFSET_Codec(field) offsetof(sketchcclCodecStats, field),
#define SCCL_OFFSET_CodecTotal(field) offsetof(sketchcclCodecStats, field),
#define SCCL_OFFSET_Accuracy(field)
#define SCCL_OFFSET_Appended(field)
constexpr size_t kCodecEntryOffsets[] = {
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_OFFSET_##exported(field)
#include "src/coll/codec_stats.def"
};
constexpr bool increasing(const size_t* v, size_t n) {
  for (size_t i = 1; i < n; ++i) {
    if (v[i] <= v[i - 1]) return false;
  }
  return true;
}
static_assert(increasing(kCodecEntryOffsets, std::size(kCodecEntryOffsets)),
              "sketchccl.h: sketchcclCodecStats' fields are not in codec_stats.def's order");

// gather_stats.def's rows: sketchcclCommStats' allgather_<field>, of the same type, in the table's
// order and together.
#define SCCL_GATHER_STAT(field, type, format, json)                                 \
  static_assert(same_type<decltype(sketchcclCommStats::allgather_##field), type>(), \
                "sketchccl.h: sketchcclCommStats.allgather_" #field                 \
                "'s type differs from gather_stats.def");
#include "src/coll/gather_stats.def"
constexpr size_t gather_fields_size() {
  size_t n = 0;
#define SCCL_GATHER_STAT(field, type, format, json) n += sizeof(type);
#include "src/coll/gather_stats.def"
  return n;
}
static_assert(offsetof(sketchcclCommStats, allgather_seconds) + sizeof(double) -
                      offsetof(sketchcclCommStats, allgather_calls) ==
                  gather_fields_size(),
              "sketchccl.h: the allgather_ fields are gather_stats.def's, together, seconds last");

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
  out->device_codec_calls = s.device_codec_calls;
#define SCCL_GATHER_STAT(field, type, format, json) out->allgather_##field = s.allgather.field;
#include "src/coll/gather_stats.def"
  for (const auto& [name, c] : s.by_codec) {
    // The communicator's totals (every codec, those past the last entry too).
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_EXPORT_TOTAL_##exported(field)
#include "src/coll/codec_stats.def"
    if (out->num_codecs == SKETCHCCL_STATS_MAX_CODECS) continue;  // totals still count it
    const int i = out->num_codecs++;
    sketchcclCodecStats& e = out->codecs[i];
    sketchcclCodecAccuracy& a = out->accuracy[i];
    std::snprintf(e.name, sizeof e.name, "%s", name.c_str());
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  SCCL_EXPORT_##exported(field, c.field)
#define SCCL_CODEC_STAT_DERIVED(name, group, json, format, exported, value) \
  SCCL_EXPORT_##exported(name, value)
#include "src/coll/codec_stats.def"
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
