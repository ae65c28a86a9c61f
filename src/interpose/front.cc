#include "src/interpose/front.h"

#include "src/interpose/interposed_front.h"
#include "src/interpose/runtime.h"
#include "src/interpose/standalone_front.h"

namespace sketchccl::interpose {

Front& front() {
  // The mode is decided once, when the runtime loads (or fails to load) the real NCCL.
  static Front& engine = Runtime::get().standalone() ? standalone_front() : interposed_front();
  return engine;
}

Front& interposed_front() {
  static auto* engine = new InterposedFront(Runtime::get().real_api());  // leaked: see Runtime
  return *engine;
}

Front& standalone_front() {
  static auto* engine = new StandaloneFront();  // leaked: exit handlers may still call in
  return *engine;
}

}  // namespace sketchccl::interpose
