#include "src/interpose/real_nccl.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <cstdlib>

#include "src/core/config.h"
#include "src/core/log.h"
#include "src/interpose/nccl_search_path.h"

namespace sketchccl::interpose {
namespace {

using GetVersionFn = int (*)(int*);

std::string loaded_path(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return "";
  }
  return map->l_name;
}

// Whether `handle`'s pncclGetVersion is SketchCCL's own: the same object also defines
// sketchcclGetVersion (a dependency that does, such as a preloaded SketchCCL, does not count).
bool is_sketchccl(void* handle) {
  void* own = dlsym(handle, "sketchcclGetVersion");
  void* nccl = dlsym(handle, "pncclGetVersion");
  if (own == nullptr) return false;
  if (nccl == nullptr) return true;
  Dl_info a{}, b{};
  if (dladdr(own, &a) == 0 || dladdr(nccl, &b) == 0) return true;  // in doubt: not a real NCCL
  return a.dli_fbase == b.dli_fbase;
}

// Accepts `handle` if it is a real NCCL; else closes it and records why.
bool accept(void* handle, const std::string& candidate, const std::string& how, RealNccl* out) {
  if (is_sketchccl(handle)) {
    out->tried.push_back(candidate + ": is SketchCCL itself, skipped");
    dlclose(handle);
    return false;
  }
  auto get_version = reinterpret_cast<GetVersionFn>(dlsym(handle, "pncclGetVersion"));
  if (get_version == nullptr) {
    out->tried.push_back(candidate + ": has no pncclGetVersion, not NCCL");
    dlclose(handle);
    return false;
  }
  int version = 0;
  if (get_version(&version) != 0) {
    out->tried.push_back(candidate + ": pncclGetVersion failed");
    dlclose(handle);
    return false;
  }
  out->handle = handle;
  out->path = loaded_path(handle);
  if (out->path.empty()) out->path = candidate;
  out->version = version;
  out->how = how;
  out->api = resolve_real_api(handle);
  return true;
}

bool try_open(const std::string& candidate, int extra_flags, const std::string& how,
              RealNccl* out) {
  void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | extra_flags);
  if (h == nullptr) {
    const char* err = dlerror();
    // RTLD_NOLOAD only asks whether it is loaded: "no" is not worth reporting.
    if ((extra_flags & RTLD_NOLOAD) == 0) {
      out->tried.push_back(candidate + ": " + (err ? err : "dlopen failed"));
    }
    return false;
  }
  return accept(h, candidate, how, out);
}

// NCCL linked into the program or into a library it loaded (PyTorch built with static NCCL,
// Horovod's static link): the next definition of pncclGetVersion after SketchCCL's, in the
// loader's order, before any dlopen. The object holding it becomes the handle.
bool try_next_definition(RealNccl* out) {
  void* fn = dlsym(RTLD_NEXT, "pncclGetVersion");
  if (fn == nullptr) return false;
  Dl_info info{};
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  const std::string where = info.dli_fname[0] != '\0' ? info.dli_fname : "the program";
  void* h = dlopen(info.dli_fname[0] != '\0' ? info.dli_fname : nullptr, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) {
    out->tried.push_back(where + " (dlsym RTLD_NEXT): cannot be reopened");
    return false;
  }
  return accept(h, where, "linked into the process (dlsym RTLD_NEXT)", out);
}

std::vector<std::string> pip_candidates() {
  std::vector<std::string> out;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* prefix = std::getenv(var);
    if (prefix == nullptr || prefix[0] == '\0') continue;
    std::string pattern =
        std::string(prefix) + "/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2";
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i)
        out.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  return out;
}

}  // namespace

RealNccl load_real_nccl(const std::string& setting) {
  RealNccl out;
  if (setting == "none") {
    out.standalone = true;
    out.how = "SKETCHCCL_NCCL_LIB=none";
    return out;
  }
  if (!setting.empty()) {
    if (!try_open(setting, 0, "SKETCHCCL_NCCL_LIB", &out)) {
      out.error = "SKETCHCCL_NCCL_LIB='" + setting + "' cannot be used: " + out.tried.back();
    }
    return out;
  }
  if (try_next_definition(&out)) return out;
  if (try_open("libnccl.so.2", RTLD_NOLOAD, "already loaded in the process", &out)) return out;
  for (const std::string& c : pip_candidates()) {
    if (try_open(c, 0, "pip wheel (nvidia/nccl/lib)", &out)) return out;
  }
  if (try_open("libnccl.so.2", 0, "loader search path", &out)) return out;
  // SketchCCL may itself be the libnccl.so.2 the name finds (JAX shim): the next one by path.
  const char* ld_path = std::getenv("LD_LIBRARY_PATH");
  for (const std::string& c : search_path_candidates("libnccl.so.2", ld_path ? ld_path : "")) {
    if (try_open(c, 0, "LD_LIBRARY_PATH or a system folder", &out)) return out;
  }
  if (try_open("/usr/local/cuda/lib64/libnccl.so.2", 0, "/usr/local/cuda/lib64", &out)) {
    return out;
  }
  out.standalone = true;
  out.how = "no real NCCL found";
  return out;
}

const RealNccl& loaded_nccl() {
  static const RealNccl* real = [] {
    auto* r = new RealNccl(load_real_nccl(Config::global().get_string(Var::kNcclLib)));  // leaked
    if (!r->error.empty()) {
      SCCL_WARN(kLogInit, "%s; running standalone", r->error.c_str());
      r->standalone = true;
    }
    if (r->standalone) {
      SCCL_INFO(kLogInit, "standalone mode (%s)", r->how.c_str());
    } else {
      SCCL_INFO(kLogInit, "forwarding to %s (NCCL %d, %s)", r->path.c_str(), r->version,
                r->how.c_str());
    }
    return r;
  }();
  return *real;
}

}  // namespace sketchccl::interpose
