// Which transports were compiled in and which work on this machine (for sketchccl-info and
// SKETCHCCL_TRANSPORT=auto); ibverbs is listed as not built, with whether a device exists.
#pragma once

#include <string>
#include <vector>

namespace sketchccl::transport {

struct TransportProbe {
  std::string name;  // "ucx", "socket", "ibverbs"
  bool compiled = false;
  bool works = false;
  std::string detail;  // version or the reason it does not work
};

// In order of preference for SKETCHCCL_TRANSPORT=auto.
std::vector<TransportProbe> probe_transports();

}  // namespace sketchccl::transport
