// sketchccl-perf's NCCL API, resolved at run time: the shim, the real NCCL, or the shim in front
// of it, so that one binary runs standalone, with SketchCCL in front of NCCL, or with NCCL alone.
#pragma once

#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include <sketchccl/sketchccl.h>
#include "perf/bench/perf_inputs.h"

namespace perfbench {

struct Nccl {
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&sketchcclCommGetStats) CommGetStats = nullptr;  // SketchCCL only (sketchccl.h)
  bool shim = false;                                        // libsketchccl.so is what answers
  std::string where;
};

// `name` in the library `h`, or a usage error naming what is missing.
template <typename F>
void resolve(void* h, const char* name, F* out) {
  void* p = dlsym(h, name);
  if (p == nullptr)
    perfinputs::input_error("%s not found in the NCCL library (%s)", name, dlerror());
  *out = reinterpret_cast<F>(p);
}

// `lib` (--lib) if given; else what is preloaded or linked in; else libsketchccl.so next to this
// binary (`want_shim`) or libnccl.so.2.
Nccl load_nccl(const std::string& lib, bool want_shim);

}  // namespace perfbench
