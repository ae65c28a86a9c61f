#include "perf/bench/perf_nccl.h"

#include "perf/bench/perf_common.h"

namespace perfbench {
namespace {

using perfinputs::input_error;

std::string dir_of(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

}  // namespace

Nccl load_nccl(const std::string& lib, bool want_shim) {
  Nccl n;
  void* h = nullptr;
  if (!lib.empty()) {
    h = dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) input_error("cannot load --lib %s: %s", lib.c_str(), dlerror());
    n.where = lib;
  } else if (dlsym(RTLD_DEFAULT, "ncclAllReduce") != nullptr) {
    h = RTLD_DEFAULT;  // preloaded (LD_PRELOAD=libsketchccl.so) or linked in
    n.where = "preloaded";
  } else if (want_shim) {
    std::string d = dir_of(perfutil::self_exe());
    for (std::string c :
         {d + "/../libsketchccl.so", d + "/libsketchccl.so", std::string("libsketchccl.so")}) {
      if (c.find('/') != std::string::npos && !perfutil::file_exists(c)) continue;
      h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (h != nullptr) {
        n.where = c;
        break;
      }
    }
    if (h == nullptr)
      input_error("cannot find libsketchccl.so next to this binary (use --lib PATH)");
  } else {
    h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr)
      input_error("cannot load libnccl.so.2 (%s); use --lib PATH or --standalone", dlerror());
    n.where = "libnccl.so.2";
  }
  resolve(h, "ncclGetUniqueId", &n.GetUniqueId);
  resolve(h, "ncclCommInitRank", &n.CommInitRank);
  resolve(h, "ncclCommDestroy", &n.CommDestroy);
  resolve(h, "ncclAllReduce", &n.AllReduce);
  resolve(h, "ncclReduceScatter", &n.ReduceScatter);
  resolve(h, "ncclAllGather", &n.AllGather);
  resolve(h, "ncclGetErrorString", &n.GetErrorString);
  resolve(h, "ncclGetLastError", &n.GetLastError);
  resolve(h, "ncclGetVersion", &n.GetVersion);
  n.shim = dlsym(h, "sketchcclGetVersion") != nullptr;
  // Optional: a plain NCCL has no statistics, and then there is no wire column.
  n.CommGetStats = reinterpret_cast<decltype(n.CommGetStats)>(dlsym(h, "sketchcclCommGetStats"));
  return n;
}

}  // namespace perfbench
