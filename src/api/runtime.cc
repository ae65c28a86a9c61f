#include "src/api/runtime.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>

#include "src/api/side.h"
#include "src/core/config.h"
#include "src/core/log.h"

namespace sketchccl::api {

Runtime& Runtime::get() {
  static Runtime* rt = [] {
    auto* r = new Runtime();  // leaked on purpose: communicators may outlive static destructors
    std::atexit(&Runtime::at_exit);
    (void)pthread_atfork(&Runtime::before_fork, &Runtime::after_fork_in_parent,
                         &Runtime::after_fork_in_child);
    return r;
  }();
  return *rt;
}

Runtime::Runtime() {
  const Config& cfg = Config::global();
  config_status_ = cfg.status();
  if (config_status_.ok()) config_status_ = coll::Settings::from_config(cfg, &settings_);
  for (const std::string& w : cfg.warnings())
    SCCL_WARN(kLogEnv, "%s", w.c_str());
  if (!config_status_.ok()) SCCL_WARN(kLogEnv, "%s", config_status_.message().c_str());
  front_settings_.enabled = cfg.get_bool(Var::kEnable);
  front_settings_.min_bytes = cfg.get_size(Var::kMinBytes);
  config_hash_ = cfg.protocol_hash();
  stats_path_ = cfg.get_string(Var::kStatsFile);
}

ncclComm_t Runtime::add_owned(std::shared_ptr<coll::Communicator> comm) {
  // Standalone handles are addresses SketchCCL owns; nobody dereferences them.
  auto handle = reinterpret_cast<ncclComm_t>(comm.get());
  add(handle, std::move(comm));
  return handle;
}

void Runtime::add(ncclComm_t handle, std::shared_ptr<coll::Communicator> comm) {
  std::shared_ptr<coll::Communicator> stale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = comms_[handle];
    stale = std::move(slot);  // a handle NCCL reused after a destroy we did not see
    slot = std::move(comm);
  }
  if (stale) stale->abort();
}

std::shared_ptr<coll::Communicator> Runtime::find(ncclComm_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(handle);
    if (it != comms_.end()) return it->second;
    if (pending_.empty() || handle == nullptr) return nullptr;
  }
  return adopt_pending(handle);
}

void Runtime::add_pending_child(PendingChild pending) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(pending));
}

std::shared_ptr<coll::Communicator> Runtime::adopt_pending(ncclComm_t handle) {
  PendingChild match;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < pending_.size(); ++i) {
      // NCCL writes the slot from its own thread once the split is done: read it atomically.
      if (__atomic_load_n(pending_[i].slot.get(), __ATOMIC_ACQUIRE) != handle) continue;
      match = std::move(pending_[i]);
      pending_.erase(pending_.begin() + static_cast<long>(i));
      break;
    }
  }
  if (match.exchange == nullptr) return nullptr;
  // Every rank split (a collective), so the exchange ends soon; it is bounded by the timeout.
  if (!match.exchange->wait().ok() || *match.child == nullptr) return nullptr;
  add(handle, *match.child);
  return *match.child;
}

std::shared_ptr<coll::Communicator> Runtime::remove(ncclComm_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  // A pending child of `handle`, or `handle` itself not adopted yet: dropped without waiting
  // (once its exchange ends, the child, if any, is released and stops).
  for (size_t i = pending_.size(); i-- > 0;) {
    if (pending_[i].parent == handle ||
        __atomic_load_n(pending_[i].slot.get(), __ATOMIC_ACQUIRE) == handle) {
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
  }
  auto it = comms_.find(handle);
  if (it == comms_.end()) return nullptr;
  auto c = it->second;
  comms_.erase(it);
  return c;
}

void Runtime::write_stats(const coll::Communicator& comm) const {
  if (stats_path_.empty()) return;
  const std::string path = expand_path_pattern(stats_path_);
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    SCCL_WARN(kLogColl, "cannot write SKETCHCCL_STATS_FILE '%s'", path.c_str());
    return;
  }
  std::fprintf(f, "%s\n", comm.stats_json().c_str());
  std::fclose(f);
}

void Runtime::at_exit() {
  Runtime& rt = get();
  std::map<ncclComm_t, std::shared_ptr<coll::Communicator>> left;
  {
    std::lock_guard<std::mutex> lock(rt.mu_);
    left.swap(rt.comms_);
  }
  // A program that exits without destroying: stop the proxy threads, all at once, then join
  // each for a bounded time (exit must not hang on a proxy stuck in a device wait).
  for (auto& [handle, comm] : left)
    comm->signal_abort();
  for (auto& [handle, comm] : left)
    join_side(comm);
}

void Runtime::before_fork() {
  get().mu_.lock();
}

void Runtime::after_fork_in_parent() {
  get().mu_.unlock();
}

void Runtime::after_fork_in_child() {
  Runtime& rt = get();
  // Leaked, never destroyed or joined: their threads live in the parent only.
  (void)new std::map<ncclComm_t, std::shared_ptr<coll::Communicator>>(std::move(rt.comms_));
  rt.comms_.clear();
  (void)new std::vector<PendingChild>(std::move(rt.pending_));
  rt.pending_.clear();
  rt.mu_.unlock();
}

}  // namespace sketchccl::api
