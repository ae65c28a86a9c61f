// sketchccl-info: what this SketchCCL is, how it is configured, and what it can use here.
#include <ifaddrs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <sketchccl/sketchccl.h>
#include "sketchccl_build_config.h"
#include "src/backend/cuda_probe.h"
#include "src/backend/cuda_query.h"
#include "src/coll/link_probe.h"
#include "src/coll/network_verdict.h"
#include "src/coll/settings.h"
#include "src/coll/topology.h"
#include "src/core/config.h"
#include "src/interpose/real_nccl.h"
#include "tools/library_needs.h"
#include "transport/probe.h"
#include "transport/socket/net.h"

namespace {

using sketchccl::Config;
using sketchccl::Var;
using sketchccl::VarSpec;

void print_help() {
  std::printf(
      "Usage: sketchccl-info [--help] [--config-table] [--probe [--nranks N]]\n"
      "\n"
      "Prints the SketchCCL version, every configuration value and where it came from\n"
      "(environment, a file, or the default), the CUDA devices or why there are none, the real\n"
      "NCCL that would be loaded, and which transports were compiled in and work here.\n"
      "Exits 1 when the configuration has a bad value.\n"
      "\n"
      "  --config-table  print the configuration reference as a Markdown table (the README's)\n"
      "  --probe         also measure this machine's codec speeds and print auto's verdicts\n"
      "                  for N ranks (default 8) on each interface's reported speed and on\n"
      "                  SKETCHCCL_LINK_GBPS (a communicator probes its own links at init)\n"
      "  --help          this text\n"
      "\n"
      "Configuration is read from the environment, then $SKETCHCCL_CONF_FILE or\n"
      "~/.sketchccl.conf, then /etc/sketchccl.conf (NAME=value lines, # comments).\n"
      "Variables:\n");
  for (const VarSpec& s : sketchccl::var_specs()) {
    std::printf("  %-28s %s (default '%s'; %s)\n", s.name, s.description, s.default_value,
                s.accepted);
  }
}

// Escapes '|' for Markdown table cells.
std::string md(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += "\\";
    out += *p;
  }
  return out;
}

void print_config_table() {
  std::printf("| variable | type | default | accepted | what it does |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  for (const VarSpec& s : sketchccl::var_specs()) {
    std::printf("| `%s` | %s | %s | %s | %s%s |\n", s.name, sketchccl::var_type_name(s.type),
                s.default_value[0] ? ("`" + std::string(s.default_value) + "`").c_str() : "(empty)",
                md(s.accepted).c_str(), md(s.description).c_str(),
                s.protocol ? " (must agree across ranks)" : "");
  }
}

void print_config(const Config& cfg) {
  std::printf("Configuration:\n");
  for (const VarSpec& s : sketchccl::var_specs()) {
    const sketchccl::Setting& set = cfg.setting(s.id);
    std::string value = set.canonical.empty() ? "(empty)" : set.canonical;
    std::printf("  %-28s = %-14s (%s)\n", s.name, value.c_str(), set.origin.describe().c_str());
  }
  for (const std::string& w : cfg.warnings())
    std::printf("  warning: %s\n", w.c_str());
  for (const std::string& e : cfg.errors())
    std::printf("  ERROR: %s\n", e.c_str());
}

void print_cuda() {
  sketchccl::backend::CudaProbe p = sketchccl::backend::probe_cuda();
  std::printf("CUDA:\n");
  if (!p.compiled) {
    std::printf("  none: %s\n", p.reason.c_str());
    return;
  }
  std::printf("  runtime %d.%d (linked statically), driver %s\n", p.runtime_version / 1000,
              (p.runtime_version % 1000) / 10,
              p.driver_version
                  ? (std::to_string(p.driver_version / 1000) + "." +
                     std::to_string((p.driver_version % 1000) / 10) + " (supports CUDA up to it)")
                        .c_str()
                  : "none");
  std::printf("  meaning: %s\n", p.driver_meaning().c_str());
  std::printf("  device calls: staged on the caller's stream, codecs on the host (docs/cuda.md)\n");
  std::printf("  kernels built for sm_%s (+PTX)\n", SKETCHCCL_CUDA_ARCHS);
  if (p.devices.empty()) std::printf("  no device: %s\n", p.reason.c_str());
  for (const auto& d : p.devices) {
    std::printf("  device %d: %s, sm_%d%d, %.1f GiB\n", d.index, d.name.c_str(), d.cc_major,
                d.cc_minor, static_cast<double>(d.memory_bytes) / (1 << 30));
  }
}

void print_nccl(const Config& cfg) {
  std::printf("Real NCCL:\n");
  std::printf("  built against nccl.h %s\n", SKETCHCCL_NCCL_HEADER_VERSION);
  sketchccl::interpose::RealNccl r =
      sketchccl::interpose::load_real_nccl(cfg.get_string(Var::kNcclLib));
  if (!r.error.empty()) {
    std::printf("  ERROR: %s\n", r.error.c_str());
  } else if (r.standalone) {
    std::printf("  standalone mode (%s): SketchCCL runs what it implements by itself\n",
                r.how.c_str());
  } else {
    std::printf("  %s, version %d.%d.%d (code %d), found by: %s\n", r.path.c_str(),
                r.version / 10000, (r.version % 10000) / 100, r.version % 100, r.version,
                r.how.c_str());
  }
  for (const std::string& t : r.tried)
    std::printf("  skipped %s\n", t.c_str());
}

void print_transports() {
  std::printf("Transports:\n");
  for (const auto& t : sketchccl::transport::probe_transports()) {
    const char* state = !t.compiled ? "not built" : t.works ? "works" : "unavailable";
    std::printf("  %-8s %-12s %s\n", t.name.c_str(), state, t.detail.c_str());
  }
}

// This host's node id; the topology (N nodes x L ranks) is found at each communicator's join and
// logged by its rank 0 at INFO (docs/hierarchy.md).
void print_topology(const Config& cfg) {
  std::string source;
  const uint64_t id = sketchccl::coll::local_host_id(&source);
  std::printf("Topology:\n");
  std::printf("  node id %016llx (%s)\n", static_cast<unsigned long long>(id), source.c_str());
  std::printf("  SKETCHCCL_HIERARCHY=%s: %s\n", cfg.get_string(Var::kHierarchy).c_str(),
              cfg.get_string(Var::kHierarchy) == "auto"
                  ? "several nodes of several ranks: exact in a node, compressed between nodes"
                  : "one compressed ring over every rank");
}

// auto's view of this machine (docs/scale.md): the codec speeds a communicator would measure, and
// the verdict per size on the links this host reports (its communicators probe the real ones).
void print_network(const sketchccl::coll::Settings& s, int nranks) {
  using namespace sketchccl::coll;
  RankFigures mine;
  measure_codecs(s, &mine);
  mine.machine = 1;
  mine.cores = machine_cores();
  struct Link {
    std::string name;
    double bytes_per_s;
  };
  std::vector<Link> links;
  if (s.link_gbps > 0) links.push_back({"SKETCHCCL_LINK_GBPS", s.link_gbps * 1e9 / 8});
  ifaddrs* list = nullptr;
  std::set<std::string> seen;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
      if (!seen.insert(ifa->ifa_name).second) continue;
      const double bps = sketchccl::transport::net::interface_bytes_per_s(ifa->ifa_name);
      if (bps > 0) links.push_back({ifa->ifa_name, bps});
    }
    freeifaddrs(list);
  }
  std::printf("Network (auto, %d ranks, one per machine):\n", nranks);
  if (!s.auto_codec) std::printf("  SKETCHCCL_CODEC is forced: every eligible call compresses\n");
  if (links.empty()) std::printf("  no interface reports a speed; set SKETCHCCL_LINK_GBPS\n");
  for (const Link& l : links) {
    mine.link_bytes_per_s = l.bytes_per_s;
    mine.stated = l.name == "SKETCHCCL_LINK_GBPS" ? 1 : 0;
    mine.latency_s = s.link_latency_us > 0 ? s.link_latency_us * 1e-6 : 10e-6;
    std::vector<RankFigures> all(static_cast<size_t>(nranks), mine);
    for (int r = 0; r < nranks; ++r)
      all[static_cast<size_t>(r)].machine = static_cast<uint64_t>(r) + 1;
    const NetworkFigures f = agree_network(s, all.data(), nranks);
    std::printf("  %s: %s\n", l.name.c_str(), f.describe().c_str());
    std::printf("    %8s  %-18s %-18s %-18s\n", "size", "standalone", "host, NCCL", "device, NCCL");
    for (size_t mib : {1, 4, 16, 64, 256}) {
      std::printf("    %4zu MiB ", mib);
      for (int column = 0; column < 3; ++column) {
        VerdictCall c;
        c.nranks = nranks;
        c.count = mib << 18;
        c.nccl_alone = column > 0;
        c.device = column == 2;
        const Verdict v = judge(f, s, c);
        char cell[64];
        std::snprintf(cell, sizeof cell, "%s %.3g/%.3g ms",
                      v.codec == sketchccl::kernels::CodecId::kNone
                          ? (c.nccl_alone ? "NCCL" : "exact")
                          : sketchccl::kernels::codec_name(v.codec),
                      v.codec_s * 1e3, v.exact_s * 1e3);
        std::printf(" %-18s", cell);
      }
      std::printf("\n");
    }
  }
  std::printf(
      "  (the verdict, its predicted time / the exact reduction's; a communicator logs its\n"
      "   own figures at init with SKETCHCCL_DEBUG=INFO)\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool probe = false;
  int nranks = 8;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--probe")) {
      probe = true;
      continue;
    }
    if (!std::strcmp(argv[i], "--nranks") && i + 1 < argc) {
      nranks = std::atoi(argv[++i]);
      if (nranks < 2 || nranks > 65536) {
        std::fprintf(stderr, "sketchccl-info: --nranks wants 2 to 65536\n");
        return 2;
      }
      continue;
    }
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      print_help();
      return 0;
    }
    if (!std::strcmp(argv[i], "--config-table")) {
      print_config_table();
      return 0;
    }
    std::fprintf(stderr, "sketchccl-info: unknown argument '%s' (see --help)\n", argv[i]);
    return 2;
  }
  const Config& cfg = Config::global();
  std::printf("SketchCCL %s\n", sketchcclGetVersionString());
  print_config(cfg);
  print_cuda();
  print_nccl(cfg);
  print_transports();
  print_topology(cfg);
  sketchccl::tools::print_library_needs();
  // The typed settings too: a value the table accepts but nothing implements fails init.
  sketchccl::Status st = cfg.status();
  sketchccl::coll::Settings settings;
  if (st.ok()) st = sketchccl::coll::Settings::from_config(cfg, &settings);
  if (!st.ok()) {
    std::fprintf(stderr, "sketchccl-info: %s\n", st.message().c_str());
    return 1;
  }
  if (probe) print_network(settings, nranks);
  return 0;
}
