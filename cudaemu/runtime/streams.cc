// Streams, host functions, synchronization and device faults.
#include <pthread.h>

#include <cstdio>
#include <deque>
#include <thread>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {

// The one callback thread of the process: host functions run there in the order they came.
struct HostCall {
  cudaHostFn_t fn;
  void* arg;
  bool done = false;
};
// Never destroyed: the callback thread still waits on them when the process exits (destroying a
// condition variable with a waiter blocks exit() forever).
std::mutex& g_cb_mu = *new std::mutex;
std::condition_variable& g_cb_cv = *new std::condition_variable;
std::deque<HostCall*>& g_cb_queue = *new std::deque<HostCall*>;
std::once_flag g_cb_once;

void callback_main() {
  pthread_setname_np(pthread_self(), "cudaemu-cb");
  set_in_host_function(true);
  std::unique_lock<std::mutex> lock(g_cb_mu);
  for (;;) {
    g_cb_cv.wait(lock, [] { return !g_cb_queue.empty(); });
    HostCall* c = g_cb_queue.front();
    g_cb_queue.pop_front();
    lock.unlock();
    c->fn(c->arg);
    lock.lock();
    c->done = true;
    g_cb_cv.notify_all();
  }
}

// Stream priorities as an H100 reports them: 0 (least) .. -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

}  // namespace

void run_host_function(cudaHostFn_t fn, void* arg) {
  std::call_once(g_cb_once, [] { std::thread(callback_main).detach(); });
  HostCall c{fn, arg};
  std::unique_lock<std::mutex> lock(g_cb_mu);
  g_cb_queue.push_back(&c);
  g_cb_cv.notify_all();
  // The queue stays blocked until the host function returns.
  g_cb_cv.wait(lock, [&] { return c.done; });
}

[[noreturn]] void device_fault(cudaError_t error, const char* message) {
  Item* item = current_item();
  std::fprintf(stderr, "cudaemu: device fault (%s) in %s on %s: %s\n", cudaGetErrorName(error),
               item != nullptr ? item->what.c_str() : "?",
               item != nullptr ? item->stream_name.c_str() : "?", message);
  set_sticky(error);
  throw DeviceFaultStop{};
}

}  // namespace cudaemu

using namespace cudaemu;

extern "C" {

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (s == nullptr || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) {
    return ret(cudaErrorInvalidValue);
  }
  hazard_lock_call("cudaStreamCreate");
  // Out-of-range priorities are clamped, as CUDA does.
  if (priority > kLeastPriority) priority = kLeastPriority;
  if (priority < kGreatestPriority) priority = kGreatestPriority;
  *s = static_cast<CUstream_st*>(create_stream(flags, priority));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return cudaStreamCreateWithPriority(s, flags, kLeastPriority);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return cudaStreamCreateWithPriority(s, cudaStreamDefault, kLeastPriority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return ret(cudaErrorInvalidResourceHandle);
  }
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  hazard_lock_call("cudaStreamDestroy");
  std::lock_guard<std::mutex> lock(mu());
  if (s->capture != nullptr) return ret(cudaErrorStreamCaptureUnsupported);
  // Work already queued still completes; the handle is gone now.
  s->destroyed = true;
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (priority == nullptr) return ret(cudaErrorInvalidValue);
  *priority = s->priority;
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (flags == nullptr) return ret(cudaErrorInvalidValue);
  *flags = s->flags;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (least != nullptr) *least = kLeastPriority;
  if (greatest != nullptr) *greatest = kGreatestPriority;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  e = capture_unsafe_call("cudaStreamQuery");
  if (e != cudaSuccess) return ret(e);
  std::lock_guard<std::mutex> lock(mu());
  e = capture_conflict_locked(s, true);
  if (e != cudaSuccess) return ret(e);
  if (s->legacy) {
    for (const ItemPtr& d : legacy_fence_locked()) {
      if (!d->done.load()) return cudaErrorNotReady;
    }
    return cudaSuccess;
  }
  if (s->last && !s->last->done.load()) return cudaErrorNotReady;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  e = capture_unsafe_call("cudaStreamSynchronize");
  if (e != cudaSuccess) return ret(e);
  std::vector<ItemPtr> wait;
  {
    std::lock_guard<std::mutex> lock(mu());
    e = capture_conflict_locked(s, true);
    if (e != cudaSuccess) return ret(e);
    // Synchronizing the legacy stream waits for what legacy work queued now would wait for.
    if (s->legacy) {
      wait = legacy_fence_locked();
    } else if (s->last) {
      wait.push_back(s->last);
    }
  }
  for (const ItemPtr& i : wait)
    wait_done(i);
  trim_pools();
  return ret(sticky_error());
}

cudaError_t cudaDeviceSynchronize() {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  e = capture_unsafe_call("cudaDeviceSynchronize");
  if (e != cudaSuccess) return ret(e);
  device_sync();
  trim_pools();
  return ret(sticky_error());
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (fn == nullptr) return ret(cudaErrorInvalidValue);
  return submit(
      stream, "host function", [fn, user_data] { run_host_function(fn, user_data); }, false);
}

}  // extern "C"
