// Finding and loading the real NCCL that SketchCCL forwards to.
#pragma once

#include <string>
#include <vector>

#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

struct RealNccl {
  bool standalone = false;  // SKETCHCCL_NCCL_LIB=none, or nothing loadable was found
  void* handle = nullptr;   // dlopen handle of the real library
  std::string path;         // the file actually loaded
  int version = 0;          // pncclGetVersion's answer
  std::string how;          // which rule found it ("SKETCHCCL_NCCL_LIB", "already loaded", ...)
  std::vector<std::string> tried;  // "candidate: why it was skipped", for diagnostics
  std::string error;  // set when SKETCHCCL_NCCL_LIB names a library that cannot be used
  RealApi api;        // its functions, resolved when it was accepted
};

// setting: the value of SKETCHCCL_NCCL_LIB ("" = search, "none" = standalone, else a path).
// Search order: the next definition of pncclGetVersion after SketchCCL's (dlsym RTLD_NEXT: NCCL
// linked into the program or a library, whatever its file is called), a libnccl.so.2 already
// loaded in the process, the pip wheel's nvidia/nccl/lib under $VIRTUAL_ENV or $CONDA_PREFIX,
// the loader path, each libnccl.so.2 of LD_LIBRARY_PATH and the system folders by path,
// /usr/local/cuda/lib64. A candidate that is SketchCCL itself (its pncclGetVersion and
// sketchcclGetVersion in one object) is skipped.
RealNccl load_real_nccl(const std::string& setting);

// The real NCCL of this process: loaded at the first call from SKETCHCCL_NCCL_LIB and logged
// (which library, or standalone and why), never unloaded. standalone: no front in front of it.
const RealNccl& loaded_nccl();

}  // namespace sketchccl::interpose
