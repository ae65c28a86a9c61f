#include "src/backend/stream_gate.h"

#include <chrono>

#include "src/backend/cuda/stream_gate.h"
#include "src/backend/device_runtime.h"

namespace sketchccl::backend {

void GateMarker::fire() {
  std::lock_guard<std::mutex> lock(mu_);
  fired_ = true;
  cv_.notify_all();
}

void GateMarker::cancel(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.ok()) cancelled_ = why.ok() ? Status(Code::kInternalError, "cancelled") : why;
  cv_.notify_all();
}

bool GateMarker::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

bool GateMarker::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !cancelled_.ok();
}

Status GateMarker::wait(double timeout_s, const std::atomic<bool>* abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!cancelled_.ok()) return cancelled_;
    if (fired_) break;
    if (abort != nullptr && abort->load()) {
      return Status(Code::kRemoteError, "aborted while waiting for the caller's stream");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return errorf(Code::kRemoteError,
                    "the caller's stream did not reach the AllReduce within SKETCHCCL_TIMEOUT "
                    "(%.0f s): work queued before it on that stream never finished",
                    timeout_s);
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

Status make_stream_gate(MemoryType mem, int device, std::unique_ptr<StreamGate>* out) {
  if (mem != MemoryType::kDevice) {
    return Status(Code::kInvalidUsage, "stream gate: host memory has no streams");
  }
  return device_runtime().make_gate(device, out);
}

bool any_stream_gate_holding() {
  return CudaStreamGate::any_holding();
}

}  // namespace sketchccl::backend
