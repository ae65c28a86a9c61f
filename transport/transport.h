// The Transport interface (docs/transport.md): what the ring needs to move packets.
// Implementations: ucx/ (primary) and socket/ (always built); a verbs transport is not built yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/core/config.h"
#include "src/core/status.h"

namespace sketchccl::transport {

using Blob = std::vector<uint8_t>;  // an endpoint's address, all-gathered by the bootstrap
using RequestId = uint64_t;

// Fields read from the configuration take their values, defaults included, from the table
// (core/config_vars.def); rank, nranks and address_family are the caller's.
struct TransportOptions {
  std::string kind;  // SKETCHCCL_TRANSPORT: auto | ucx | socket
  int rank = 0;
  int nranks = 1;
  double timeout_s;        // SKETCHCCL_TIMEOUT: bound on every wait
  std::string ifname;      // SKETCHCCL_SOCKET_IFNAME
  int address_family = 0;  // socket transport: 0 (IPv4 preferred, else IPv6), AF_INET, AF_INET6
  // Socket transport: most bytes held for messages that arrived before their receive was posted
  // (SKETCHCCL_SOCKET_BUFFER_LIMIT); a peer sending more fails.
  uint64_t max_unexpected_bytes;
  std::string wait;  // SKETCHCCL_WAIT: auto | block | spin (whether wait_for_events blocks)

  TransportOptions() : TransportOptions(Config::defaults()) {}
  explicit TransportOptions(const Config& cfg);
  // The configured fields from Config::global(); rank and nranks as given.
  static TransportOptions from_config(int rank, int nranks);
};

// What a transport can carry (as NCCL's ncclNet_t::getProperties reports it): its users check
// their needs against it instead of assuming one transport's limits.
struct TransportProperties {
  int tag_bits = 64;           // isend/irecv tags must be below 2^tag_bits (64: any tag)
  bool device_memory = false;  // isend/irecv accept device memory
};

// What a transport knows of its link to a peer: the path ("tcp via eth0") and the nominal rate
// the system reports for it, bytes per second per direction; 0 when unknown (loopback, shared
// memory, an interface without a speed in sysfs).
struct LinkReport {
  std::string path;
  double nominal_bytes_per_s = 0;
  std::string detail;  // the transport's own account of the endpoint (UCX: its lanes, protocols)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportProperties properties() const = 0;
  // This rank's address, to be all-gathered.
  virtual Blob address() const = 0;
  // Connects to `peer` from its address blob. Both sides of a pair call it.
  virtual Status connect(int peer, const Blob& address) = 0;
  // Tagged, non-blocking. A receive matches the send from `peer` with the same tag, whichever
  // is posted first. Buffers stay valid until the request completes. A message larger than the
  // receive buffer is an error on the receiver.
  virtual Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, RequestId* id) = 0;
  virtual Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, RequestId* id) = 0;
  // Drives communication; called by the owning (proxy) thread only.
  virtual Status progress() = 0;
  // Whether wait_for_events can sleep until there is something to progress (SKETCHCCL_WAIT and
  // what the transport supports); without it, callers poll progress() and yield.
  virtual bool can_block() const { return false; }
  // Sleeps until progress() may have work (data arrived, a socket can take more, a connection
  // or hang-up) or max_s seconds passed, whichever comes first; returns at once where
  // can_block() is false. Owning thread only; callers keep their own abort and timeout checks.
  virtual Status wait_for_events(double max_s) {
    (void)max_s;
    return Status::Ok();
  }
  // *done = true once complete (and the request is released); a failed request returns its
  // error (peer gone: kRemoteError; timeout: kRemoteError naming the peer). *bytes = received.
  virtual Status test(RequestId id, bool* done, size_t* bytes) = 0;
  // The link to a connected `peer`, as far as the transport can tell (auto's model,
  // sketchccl-info).
  virtual LinkReport link_report(int peer) const {
    (void)peer;
    return {};
  }
  // Orderly close: cancels what is pending, disconnects.
  virtual void close() = 0;
};

// Creates the transport named by opts.kind; "auto" picks the best that works here (ucx when
// built and working, else socket); another kind fails, naming the accepted ones.
Status create_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out);

}  // namespace sketchccl::transport
