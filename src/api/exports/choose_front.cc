#include "src/api/exports/choose_front.h"

#include "src/api/runtime.h"
#include "src/interpose/front.h"
#include "src/interpose/real_nccl.h"
#include "src/standalone/front.h"

namespace sketchccl::api {

Front& front() {
  static Front& chosen = []() -> Front& {
    (void)Runtime::get();  // the configuration checked (and its warnings logged) first
    return interpose::loaded_nccl().standalone ? standalone::standalone_front()
                                               : interpose::interposed_front();
  }();
  return chosen;
}

}  // namespace sketchccl::api
