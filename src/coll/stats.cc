#include "src/coll/stats.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

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

// codec_stats.def's columns.
enum class Format { Int, Fixed, General };
enum class Group { Always, TwoShot, S2, Support, ErrorFeedback, Estimate, kCount };
enum class Fold { Sum, Max, Calls, Sent, Own };

bool above_zero(uint64_t v) {
  return v > 0;
}
bool above_zero(double v) {
  return v > 0;
}
bool above_zero(const stat_types::U64x3& v) {
  for (uint64_t x : v) {
    if (x > 0) return true;
  }
  return false;
}

// One JSON object written item by item, in the table's order: ", " between items, and a key
// "a.b" is key b of the nested object a (opened at its first item, closed after its last).
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string* out) : out_(out) {}
  ~ObjectWriter() {
    if (!nested_.empty()) *out_ += "}";
  }

  template <Format F>
  void item(const char* key, uint64_t v) {
    static_assert(F == Format::Int, "codec_stats.def: a count's format is Int");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(v));
    write(key, buf);
  }
  template <Format F>
  void item(const char* key, double v) {
    static_assert(F != Format::Int, "codec_stats.def: a double's format is Fixed or General");
    char buf[64];
    std::snprintf(buf, sizeof buf, F == Format::Fixed ? "%.6f" : "%.6g", v);
    write(key, buf);
  }
  // Counters by encoding have no key of their own (json ""): their figures are derived rows.
  template <Format F>
  void item(const char*, const stat_types::U64x3&) {}

 private:
  void write(const char* key, const char* value) {
    const char* dot = std::strchr(key, '.');
    const std::string outer = dot != nullptr ? std::string(key, dot) : std::string();
    if (outer != nested_) {
      if (!nested_.empty()) *out_ += "}";
      if (!outer.empty()) {
        separate();
        *out_ += "\"" + outer + "\": {";
        first_ = true;
      }
      nested_ = outer;
    }
    separate();
    *out_ += "\"";
    *out_ += dot != nullptr ? dot + 1 : key;
    *out_ += "\": ";
    *out_ += value;
  }
  void separate() {
    if (!first_) *out_ += ", ";
    first_ = false;
  }

  std::string* out_;
  std::string nested_;  // the nested object open now ("" for none)
  bool first_ = true;
};

// One codec's object, `"name": {...}`, from codec_stats.def: the groups shown, then every
// written row in table order.
void append_codec(std::string* out, const std::string& name, const CodecStats& c) {
  bool shown[static_cast<size_t>(Group::kCount)] = {};
  shown[static_cast<size_t>(Group::Always)] = true;
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  if ((shows) && above_zero(c.field)) shown[static_cast<size_t>(Group::group)] = true;
#include "src/coll/codec_stats.def"
  *out += "\"" + name + "\": {";
  {
    ObjectWriter w(out);
#define SCCL_CODEC_STAT(field, type, format, fold, group, shows, json, exported) \
  if (shown[static_cast<size_t>(Group::group)] && (json)[0] != '\0') {           \
    w.item<Format::format>(json, c.field);                                       \
  }
#define SCCL_CODEC_STAT_DERIVED(name, group, json, format, exported, value) \
  if (shown[static_cast<size_t>(Group::group)]) w.item<Format::format>(json, value);
#include "src/coll/codec_stats.def"
  }
  *out += "}";
}

template <typename T>
void add(T* to, const T& from) {
  *to += from;
}
void add(stat_types::U64x3* to, const stat_types::U64x3& from) {
  for (size_t i = 0; i < to->size(); ++i)
    (*to)[i] += from[i];
}

template <Fold F, typename T>
void fold(const CodecStats& from, const T& value, T* to, bool count_calls) {
  if constexpr (F == Fold::Sum) {
    add(to, value);
  } else if constexpr (F == Fold::Max) {
    *to = std::max(*to, value);
  } else if constexpr (F == Fold::Calls) {
    if (count_calls) add(to, value);
  } else if constexpr (F == Fold::Sent) {
    *to += from.bytes_sent;
  }
}

}  // namespace

void add_codec_stats(const CodecStats& from, CodecStats* to, bool count_calls) {
#define SCCL_CODEC_STAT(field, type, format, fold_how, group, shows, json, exported) \
  fold<Fold::fold_how>(from, from.field, &to->field, count_calls);
#include "src/coll/codec_stats.def"
}

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
      "\"proxy_cuda_calls\": %llu, \"device_codec_calls\": %llu",
      static_cast<unsigned long long>(comm_id), rank, nranks,
      static_cast<unsigned long long>(calls_taken),
      static_cast<unsigned long long>(calls_forwarded),
      static_cast<unsigned long long>(calls_failed), nodes, ranks_per_node,
      hierarchical ? "true" : "false", static_cast<unsigned long long>(decisions_disagreed),
      static_cast<unsigned long long>(calls_forwarded_no_gain),
      static_cast<unsigned long long>(calls_exact_no_gain), link_gbps, link_latency_us,
      static_cast<unsigned long long>(device_bytes), static_cast<unsigned long long>(pinned_bytes),
      suspended ? "true" : "false", static_cast<unsigned long long>(proxy_cuda_calls),
      static_cast<unsigned long long>(device_codec_calls));
  out += buf;
  append_memory(&out, *this);
  out += ", \"codecs\": {";
  bool first = true;
  for (const auto& [name, c] : by_codec) {
    if (!first) out += ", ";
    append_codec(&out, name, c);
    first = false;
  }
  out += "}";
  if (allgather.calls > 0) {
    out += ", \"allgather\": {";
    {
      ObjectWriter w(&out);
#define SCCL_GATHER_STAT(field, type, format, json) w.item<Format::format>(json, allgather.field);
#include "src/coll/gather_stats.def"
    }
    out += "}";
  }
  out += "}";
  return out;
}

}  // namespace sketchccl::coll
