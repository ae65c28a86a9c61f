// Events: recorded as an item of the stream; complete when that item has run.
#include <chrono>

#include "cudaemu/runtime/state.h"

struct CUevent_st {
  unsigned flags = 0;
  cudaemu::ItemPtr recorded;                      // under mu()
  std::shared_ptr<std::atomic<double>> stamp_ms;  // set when the record runs
  cudaemu::Capture* captured = nullptr;           // recorded into a capture (joins waiters to it)
};

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

constexpr unsigned kEventFlags =
    cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

}  // namespace

using namespace cudaemu;

extern "C" {

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr || (flags & ~kEventFlags) != 0) return ret(cudaErrorInvalidValue);
  // Interprocess events must disable timing (CUDA's rule).
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) {
    return ret(cudaErrorInvalidValue);
  }
  hazard_lock_call("cudaEventCreate");
  auto* x = new CUevent_st();
  x->flags = flags;
  *ev = x;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* ev) {
  return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr) return ret(cudaErrorInvalidResourceHandle);
  hazard_lock_call("cudaEventDestroy");
  // A record still queued keeps its item (and stamp) alive by itself.
  std::lock_guard<std::mutex> lock(mu());
  delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr) return ret(cudaErrorInvalidResourceHandle);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  auto stamp = std::make_shared<std::atomic<double>>(0.0);
  ItemPtr item;
  {
    std::lock_guard<std::mutex> lock(mu());
    e = capture_conflict_locked(s, false);
    if (e != cudaSuccess) return ret(e);
    if (s->capture != nullptr) {
      // Inside a capture the event names a node of the graph: a stream waiting on it joins.
      ev->captured = s->capture;
      ev->recorded.reset();
      return cudaSuccess;
    }
    item = std::make_shared<Item>();
    item->what = "event record";
    item->device_access = false;
    item->work = [stamp] { stamp->store(now_ms()); };
    push_locked(s, item);
    ev->recorded = item;
    ev->captured = nullptr;
    ev->stamp_ms = stamp;
  }
  if (launch_blocking()) wait_done(item);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr) return ret(cudaErrorInvalidResourceHandle);
  e = capture_unsafe_call("cudaEventQuery");
  if (e != cudaSuccess) return ret(e);
  std::lock_guard<std::mutex> lock(mu());
  if (ev->captured != nullptr) return ret(cudaErrorStreamCaptureUnsupported);
  if (ev->recorded && !ev->recorded->done.load()) return cudaErrorNotReady;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr) return ret(cudaErrorInvalidResourceHandle);
  e = capture_unsafe_call("cudaEventSynchronize");
  if (e != cudaSuccess) return ret(e);
  ItemPtr item;
  {
    std::lock_guard<std::mutex> lock(mu());
    if (ev->captured != nullptr) return ret(cudaErrorStreamCaptureUnsupported);
    item = ev->recorded;
  }
  wait_done(item);
  trim_pools();
  return ret(sticky_error());
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ev == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if ((flags & ~unsigned(cudaEventWaitExternal)) != 0) return ret(cudaErrorInvalidValue);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  ItemPtr item;
  {
    std::lock_guard<std::mutex> lock(mu());
    e = capture_conflict_locked(s, false);
    if (e != cudaSuccess) return ret(e);
    if (ev->captured != nullptr) {
      // Waiting on a node of a capture joins this stream to that capture.
      if (s->capture != nullptr && s->capture != ev->captured) return ret(cudaErrorIllegalState);
      s->capture = ev->captured;
      return cudaSuccess;
    }
    if (s->capture != nullptr) {
      // An event from outside the capture: its completion is already a precondition.
      return cudaSuccess;
    }
    // A never-recorded event: nothing to wait for.
    if (!ev->recorded) return cudaSuccess;
    item = std::make_shared<Item>();
    item->what = "event wait";
    item->device_access = false;
    item->deps.push_back(ev->recorded);
    push_locked(s, item);
  }
  if (launch_blocking()) wait_done(item);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (ms == nullptr) return ret(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(mu());
  if ((start->flags | end->flags) & cudaEventDisableTiming) {
    return ret(cudaErrorInvalidResourceHandle);
  }
  if (!start->recorded || !end->recorded) return ret(cudaErrorInvalidResourceHandle);
  if (!start->recorded->done.load() || !end->recorded->done.load()) {
    return ret(cudaErrorNotReady);
  }
  *ms = static_cast<float>(end->stamp_ms->load() - start->stamp_ms->load());
  return cudaSuccess;
}

}  // extern "C"
