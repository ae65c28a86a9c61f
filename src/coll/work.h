// A unit of work handed to a communicator's proxy thread and completed exactly once.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

#include "src/core/status.h"

namespace sketchccl::coll {

class Work {
 public:
  explicit Work(std::function<Status()> fn) : fn_(std::move(fn)) {}

  // Runs exactly once when the work completes -- ran, failed, or dropped by abort or a
  // finalized communicator -- on the completing thread. Set it before the work is queued.
  // (A staged device call writes its `done` flag here, releasing the caller's stream.)
  void set_on_complete(std::function<void()> f) { on_complete_ = std::move(f); }

  // On the proxy thread.
  void run() { complete(fn_()); }
  void complete(Status st) {
    std::function<void()> after;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      status_ = std::move(st);
      done_ = true;
      after = std::move(on_complete_);
      cv_.notify_all();
    }
    if (after) after();
  }

  // On the caller's thread.
  Status wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return status_;
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::function<Status()> fn_;
  std::function<void()> on_complete_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

}  // namespace sketchccl::coll
