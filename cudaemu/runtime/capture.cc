// Stream capture in its three modes, with CUDA's rules for potentially unsafe calls; graphs
// replay the captured operations in capture order on the launch stream.
#include <pthread.h>

#include <algorithm>

#include "cudaemu/runtime/state.h"

namespace cudaemu {

struct Node {
  std::string what;
  std::function<void()> work;
  bool device_access = true;
};

struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  pthread_t thread{};
  Stream* origin = nullptr;
  bool invalidated = false;
  unsigned long long id = 0;
  std::vector<Node> nodes;
};

namespace {
std::vector<Capture*>& g_captures = *new std::vector<Capture*>;  // active ones, under mu()
unsigned long long g_next_capture = 1;
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

void detach_streams_locked(Capture* c) {
  for (Stream* s : all_streams()) {
    if (s->capture == c) s->capture = nullptr;
  }
  g_captures.erase(std::remove(g_captures.begin(), g_captures.end(), c), g_captures.end());
}
}  // namespace

cudaError_t capture_unsafe_call(const char* call) {
  (void)call;
  init();
  if (t_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu());
  const pthread_t me = pthread_self();
  bool prohibited = false;
  for (Capture* c : g_captures) {
    const bool mine = pthread_equal(c->thread, me) != 0;
    // Own non-relaxed captures forbid it in global and thread-local mode; another thread's
    // global capture forbids it in global mode.
    const bool forbids =
        mine ? c->mode != cudaStreamCaptureModeRelaxed
             : (t_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal);
    if (forbids) {
      c->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_conflict_locked(Stream* s, bool is_sync) {
  if (s->capture != nullptr && is_sync) {
    s->capture->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (s->legacy) {
    // Legacy work would depend on a capturing blocking stream: refused, the capture broken.
    bool conflict = false;
    for (Stream* o : all_streams()) {
      if (o->blocking() && o->capture != nullptr) {
        o->capture->invalidated = true;
        conflict = true;
      }
    }
    if (conflict) return cudaErrorStreamCaptureImplicit;
  }
  return cudaSuccess;
}

void capture_record_locked(Stream* s, const char* what, std::function<void()> work,
                           bool device_access) {
  s->capture->nodes.push_back(Node{what, std::move(work), device_access});
}

}  // namespace cudaemu

struct CUgraph_st {
  std::vector<cudaemu::Node> nodes;
};
struct CUgraphExec_st {
  std::vector<cudaemu::Node> nodes;
};

using namespace cudaemu;

extern "C" {

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (mode == nullptr || *mode > cudaStreamCaptureModeRelaxed) return ret(cudaErrorInvalidValue);
  std::swap(*mode, t_mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (mode > cudaStreamCaptureModeRelaxed) return ret(cudaErrorInvalidValue);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  // The legacy stream cannot be captured.
  if (s->legacy) return ret(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::mutex> lock(mu());
  if (s->capture != nullptr) return ret(cudaErrorIllegalState);
  auto* c = new Capture();
  c->mode = mode;
  c->thread = pthread_self();
  c->origin = s;
  c->id = g_next_capture++;
  s->capture = c;
  g_captures.push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (graph == nullptr) return ret(cudaErrorInvalidValue);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(mu());
  Capture* c = s->capture;
  if (c == nullptr || c->origin != s) return ret(cudaErrorIllegalState);
  if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self())) {
    return ret(cudaErrorStreamCaptureWrongThread);
  }
  detach_streams_locked(c);
  *graph = nullptr;
  if (c->invalidated) {
    delete c;
    return ret(cudaErrorStreamCaptureInvalidated);
  }
  auto* g = new CUgraph_st();
  g->nodes = std::move(c->nodes);
  delete c;
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (status == nullptr) return ret(cudaErrorInvalidValue);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(mu());
  if (s->legacy) {
    // Asking about the legacy stream while a blocking stream captures is itself unsupported.
    for (Stream* o : all_streams()) {
      if (o->blocking() && o->capture != nullptr) return ret(cudaErrorStreamCaptureImplicit);
    }
  }
  if (s->capture == nullptr) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status = s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (exec == nullptr || graph == nullptr) return ret(cudaErrorInvalidValue);
  (void)flags;
  auto* x = new CUgraphExec_st();
  x->nodes = graph->nodes;
  *exec = x;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (exec == nullptr) return ret(cudaErrorInvalidResourceHandle);
  for (const Node& n : exec->nodes) {
    e = submit(stream, n.what.c_str(), n.work, n.device_access);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (graph == nullptr) return ret(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (exec == nullptr) return ret(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}

}  // extern "C"
