// Process-wide state both fronts share: the configuration's verdict and its typed settings, the
// side table from NCCL handle to SketchCCL communicator, the statistics at exit. Which front runs
// is decided above (src/api/exports/), the real NCCL loaded beside (src/interpose/real_nccl.h).
#pragma once

#include <nccl.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/coll/comm.h"
#include "src/coll/settings.h"
#include "src/core/status.h"

namespace sketchccl::api {

// What the fronts decide per call (the engine's own settings are coll::Settings).
struct FrontSettings {
  bool enabled = true;  // SKETCHCCL_ENABLE
  // SKETCHCCL_MIN_BYTES: smaller calls are forwarded (standalone: run exact).
  size_t min_bytes = 1 << 20;
};

class Runtime {
 public:
  // Created on first use (thread-safe); never destroyed before exit handlers run.
  static Runtime& get();

  // The configuration's verdict: a bad value fails every init with its message.
  const Status& config_status() const { return config_status_; }
  const coll::Settings& settings() const { return settings_; }
  const FrontSettings& front_settings() const { return front_settings_; }
  uint64_t config_hash() const { return config_hash_; }

  // The side table. Standalone: SketchCCL mints the handle (add_owned). In front of a real
  // NCCL: keyed by the real communicator (add).
  ncclComm_t add_owned(std::shared_ptr<coll::Communicator> comm);
  void add(ncclComm_t real, std::shared_ptr<coll::Communicator> comm);
  // A handle not in the table may be a nonblocking split's child NCCL has since written into
  // the caller's newcomm: find() then adopts it, waiting for the parent's exchange (bounded).
  std::shared_ptr<coll::Communicator> find(ncclComm_t handle);
  // Also forgets the pending children of `handle`, and `handle` if it is one.
  std::shared_ptr<coll::Communicator> remove(ncclComm_t handle);

  // A nonblocking split's child: SketchCCL's side exists once `exchange` (on the parent's proxy)
  // has set *child, and its handle once NCCL writes it into *slot (SketchCCL's own newcomm,
  // never the caller's).
  struct PendingChild {
    ncclComm_t parent = nullptr;
    std::shared_ptr<ncclComm_t> slot;
    std::shared_ptr<coll::Work> exchange;
    std::shared_ptr<std::shared_ptr<coll::Communicator>> child;
  };
  void add_pending_child(PendingChild pending);

  // Writes one JSON line for the communicator to SKETCHCCL_STATS_FILE, if set.
  void write_stats(const coll::Communicator& comm) const;

 private:
  Runtime();
  static void at_exit();
  // pthread_atfork: the side table is locked across fork(); a child forgets the parent's
  // communicators (their proxy threads do not exist there) so that its exit() never joins them.
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();

  Status config_status_;
  coll::Settings settings_;
  FrontSettings front_settings_;
  uint64_t config_hash_ = 0;
  std::string stats_path_;
  std::shared_ptr<coll::Communicator> adopt_pending(ncclComm_t handle);

  mutable std::mutex mu_;
  std::map<ncclComm_t, std::shared_ptr<coll::Communicator>> comms_;
  std::vector<PendingChild> pending_;
};

}  // namespace sketchccl::api
