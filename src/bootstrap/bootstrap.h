// Rendezvous over the 128-byte ncclUniqueId (docs/interposition.md).
//
// NCCL uses bytes 0-39 of the id and zeroes the rest. create_root() writes a SketchCCL record
// into bytes 40-127 (magic, version, the address of a root listener it starts, a random
// 64-bit secret, a checksum) and leaves bytes 0-39 untouched. Every rank of that id then runs
// a Join in the background: it connects to the root, proves the secret and sends its rank,
// the rank count, its transport address and its configuration hash. The root checks the
// secret, the rank number, the rank count (learnt from the first rank) and duplicates,
// answers rejected connections with an error naming the problem, and once every rank is in
// sends all of them the table of addresses and hashes, then exits. Every wait is bounded by
// the timeout (SKETCHCCL_TIMEOUT).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/core/config.h"
#include "src/core/status.h"
#include "transport/transport.h"

namespace sketchccl::bootstrap {

constexpr size_t kUniqueIdBytes = 128;
constexpr size_t kRecordOffset = 40;  // NCCL's handle is bytes 0-39
constexpr uint16_t kRecordVersion = 1;

// timeout_s and ifname, defaults included, come from the table (core/config_vars.def).
struct Options {
  double timeout_s;        // SKETCHCCL_TIMEOUT
  std::string ifname;      // SKETCHCCL_SOCKET_IFNAME: where the root listener listens
  int address_family = 0;  // 0: IPv4 preferred, else IPv6; or AF_INET / AF_INET6

  Options() : Options(Config::defaults()) {}
  explicit Options(const Config& cfg);
  static Options from_config();  // timeout and socket_ifname() from Config::global()
};

// The interfaces the bootstrap and the socket transport may use: SKETCHCCL_SOCKET_IFNAME, else
// NCCL_SOCKET_IFNAME from the environment (a job tuned for NCCL works unchanged), else "".
std::string socket_ifname(const Config& cfg);

// Writes the record into id[40..127] and starts the root listener for it (a background
// thread that lives until every rank has joined and received the table, or until the timeout
// counted from the first rank's arrival; before any rank comes it waits, however late the
// first init is, until release_root() or the process's exit). Bytes 0-39 are not read or
// written.
Status create_root(uint8_t id[kUniqueIdBytes], const Options& opts);

// Stops, quietly, the root listener this process started for `id`, if any (an id no rank will
// join: the extra ids of ncclCommInitRankScalable). Returns whether there was one.
bool release_root(const uint8_t id[kUniqueIdBytes]);

// True when id[40..127] holds a well-formed record (magic, version and checksum).
bool has_record(const uint8_t id[kUniqueIdBytes]);

// Decoded record, for logs and tools: "root 127.0.0.1:40123".
Status describe_record(const uint8_t id[kUniqueIdBytes], std::string* out);

// The record's fields: the root's encoded address (transport/socket/net.h format) and secret
// (for tests that play a misbehaving client).
Status record_fields(const uint8_t id[kUniqueIdBytes], std::vector<uint8_t>* root_address,
                     uint64_t* secret);

// Tells the root of `id` that this rank cannot join (out of memory, no transport: `why`), so
// that it fails the ranks already waiting now rather than at 0.8 x the timeout. Best effort:
// bounded by min(2 s, the timeout); an error only says that the root could not be told.
Status abandon(const uint8_t id[kUniqueIdBytes], int rank, int nranks, const std::string& why,
               const Options& opts);

struct JoinResult {
  int rank = 0;
  int nranks = 0;
  std::vector<transport::Blob> addresses;  // per rank
  std::vector<uint64_t> config_hashes;     // per rank
  // True when every rank's configuration hash equals this rank's.
  bool configs_agree() const;
};

// A background join: start() returns at once; the work runs on its own thread, so one thread
// may start the joins of several ranks (a group) and then wait for all of them.
class Join {
 public:
  // Fails at once (kInvalidArgument) on an id without a record or a rank outside [0, nranks).
  static Status start(const uint8_t id[kUniqueIdBytes], int rank, int nranks,
                      const transport::Blob& address, uint64_t config_hash, const Options& opts,
                      std::unique_ptr<Join>* out);
  // Cancels a join still running (closes its socket) and waits for its thread (briefly).
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Non-blocking: has the join finished (successfully or not)?
  bool done() const;
  // Waits up to `seconds` (0: just polls). Returns kInProgress while still running, else the
  // final status: Ok, kRemoteError (timeout, root unreachable, rejected by the root with its
  // reason), kInvalidArgument (the table does not fit this rank).
  Status wait(double seconds);
  // The table; valid once wait() has returned Ok.
  const JoinResult& result() const;

  struct State;

 private:
  Join() = default;
  std::shared_ptr<State> state_;
};

// start() + wait(forever; the join bounds itself by opts.timeout_s).
Status join(const uint8_t id[kUniqueIdBytes], int rank, int nranks, const transport::Blob& address,
            uint64_t config_hash, const Options& opts, JoinResult* out);

// Root listeners of this process still running (for tests).
size_t active_root_listeners();
// Is the root listener this id names still running in this process? (for tests; unlike the count
// above, other tests' roots winding down cannot change it)
bool root_listening(const uint8_t id[kUniqueIdBytes]);

}  // namespace sketchccl::bootstrap
