// Process-wide state of the interposer: the mode (standalone or in front of a real NCCL), the
// configuration check, the table of communicators, the last error text, and the stats at exit.
#pragma once

#include <nccl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "coll/comm.h"
#include "coll/settings.h"
#include "core/status.h"
#include "interpose/real_nccl.h"

namespace sketchccl::interpose {

class Runtime {
 public:
  // Created on first use (thread-safe); never destroyed before exit handlers run.
  static Runtime& get();

  bool standalone() const { return real_.standalone; }
  const RealNccl& real() const { return real_; }
  // A pnccl* symbol of the real library, or nullptr.
  void* real_symbol(const char* name) const;

  // The configuration's verdict: a bad value fails every init with its message.
  const Status& config_status() const { return config_status_; }
  const coll::Settings& settings() const { return settings_; }
  uint64_t config_hash() const { return config_hash_; }

  // The side table. Standalone: SketchCCL mints the handle (add_owned). In front of a real
  // NCCL: keyed by the real communicator (add).
  ncclComm_t add_owned(std::shared_ptr<coll::Communicator> comm);
  void add(ncclComm_t real, std::shared_ptr<coll::Communicator> comm);
  std::shared_ptr<coll::Communicator> find(ncclComm_t handle) const;
  std::shared_ptr<coll::Communicator> remove(ncclComm_t handle);

  // Writes one JSON line for the communicator to SKETCHCCL_STATS_FILE, if set.
  void write_stats(const coll::Communicator& comm) const;

 private:
  Runtime();
  static void at_exit();

  RealNccl real_;
  Status config_status_;
  coll::Settings settings_;
  uint64_t config_hash_ = 0;
  std::string stats_path_;
  mutable std::mutex mu_;
  std::map<ncclComm_t, std::shared_ptr<coll::Communicator>> comms_;
};

// ncclGetLastError text: set by every failing call.
void set_last_error(const std::string& text);
std::string last_error();

// Converts an internal Status to ncclResult_t, recording the message for ncclGetLastError.
ncclResult_t report(const Status& st, const char* api);
// The result of a forwarded call, passed through; an error makes ncclGetLastError the real one's.
ncclResult_t forwarded(ncclResult_t r);
// Whether the last failure seen on this thread was SketchCCL's own (else the real NCCL's).
bool last_error_is_ours();
// The real library lacks the symbol (a broken or foreign libnccl).
ncclResult_t missing_real(const char* api);
// Standalone mode has no implementation of this function.
ncclResult_t not_in_standalone(const char* api);

}  // namespace sketchccl::interpose
