#include "src/coll/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "src/core/config.h"

namespace sketchccl::coll {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

uint64_t local_host_id(std::string* source) {
  const std::string& own = Config::global().get_string(Var::kHostId);
  if (!own.empty()) {
    if (source != nullptr) *source = "SKETCHCCL_HOSTID=" + own;
    return fnv1a(own);
  }
  const char* nccl = std::getenv("NCCL_HOSTID");
  if (nccl != nullptr && *nccl != '\0') {
    if (source != nullptr) *source = std::string("NCCL_HOSTID=") + nccl;
    return fnv1a(nccl);
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  if (source != nullptr) *source = std::string("hostname ") + host + ", boot id " + boot;
  return fnv1a(std::string(host) + "|" + boot);
}

uint64_t machine_id() {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return fnv1a(boot);
}

Topology make_topology(int rank, const std::vector<uint64_t>& host_ids) {
  Topology t;
  t.nranks = static_cast<int>(host_ids.size());
  std::vector<uint64_t> node_ids;  // in the order of each node's lowest rank
  std::vector<std::vector<int>> members;
  t.node_of.resize(host_ids.size());
  for (size_t r = 0; r < host_ids.size(); ++r) {
    auto it = std::find(node_ids.begin(), node_ids.end(), host_ids[r]);
    const int n = static_cast<int>(it - node_ids.begin());
    if (it == node_ids.end()) {
      node_ids.push_back(host_ids[r]);
      members.emplace_back();
    }
    members[static_cast<size_t>(n)].push_back(static_cast<int>(r));
    t.node_of[r] = n;
  }
  t.nodes = static_cast<int>(node_ids.size());
  if (t.nodes == 0) return Topology{};
  t.node = t.node_of[static_cast<size_t>(rank)];
  t.node_ranks = members[static_cast<size_t>(t.node)];
  t.local = static_cast<int>(std::find(t.node_ranks.begin(), t.node_ranks.end(), rank) -
                             t.node_ranks.begin());
  t.local_ranks = static_cast<int>(t.node_ranks.size());
  for (const auto& m : members)
    t.uniform = t.uniform && m.size() == t.node_ranks.size();
  if (t.uniform) {
    for (const auto& m : members)
      t.rail_ranks.push_back(m[static_cast<size_t>(t.local)]);
  }
  return t;
}

std::string Topology::describe() const {
  char buf[128];
  if (uniform) {
    std::snprintf(buf, sizeof buf, "%d node%s x %d rank%s", nodes, nodes == 1 ? "" : "s",
                  local_ranks, local_ranks == 1 ? "" : "s");
  } else {
    size_t lo = node_of.size(), hi = 0;
    for (int n = 0; n < nodes; ++n) {
      const size_t c = static_cast<size_t>(std::count(node_of.begin(), node_of.end(), n));
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    std::snprintf(buf, sizeof buf, "%d nodes, unequal (%zu to %zu ranks)", nodes, lo, hi);
  }
  return buf;
}

}  // namespace sketchccl::coll
