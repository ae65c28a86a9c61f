#include "transport/ucx/ucx_api.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "sketchccl_build_config.h"
#include "src/core/log.h"
#include "transport/ucx/host_settings.h"

namespace sketchccl::transport {
namespace {

struct Loaded {
  UcxApi api;
  bool ok = false;
  std::string error;
};

template <typename T>
bool bind(void* handle, const char* symbol, T* slot, std::string* missing) {
  *slot = reinterpret_cast<T>(dlsym(handle, symbol));
  if (*slot == nullptr && missing->empty()) *missing = symbol;
  return *slot != nullptr;
}

const char* level_name(ucs_log_level_t level) {
  switch (level) {
    case UCS_LOG_LEVEL_FATAL:
      return "FATAL";
    case UCS_LOG_LEVEL_ERROR:
      return "ERROR";
    case UCS_LOG_LEVEL_WARN:
      return "WARN";
    case UCS_LOG_LEVEL_DIAG:
      return "DIAG";
    case UCS_LOG_LEVEL_INFO:
      return "INFO";
    default:
      return "DEBUG";
  }
}

// UCX prints to stdout by default; its lines belong in SketchCCL's log (stderr or
// SKETCHCCL_DEBUG_FILE), never in the application's output.
ucs_log_func_rc_t log_to_sketchccl(const char* file, unsigned line, const char*,
                                   ucs_log_level_t level, const ucs_log_component_config_t* comp,
                                   const char* message, va_list ap) {
  char text[512];
  std::vsnprintf(text, sizeof text, message, ap);
  const char* component = comp != nullptr ? comp->name : "UCX";
  const char* what = level_name(level);
  if (level <= UCS_LOG_LEVEL_WARN) {
    SCCL_WARN(kLogNet, "%s %s %s:%u: %s", component, what, file, line, text);
  } else if (level <= UCS_LOG_LEVEL_INFO) {
    SCCL_INFO(kLogNet, "%s %s %s:%u: %s", component, what, file, line, text);
  } else {
    SCCL_TRACE(kLogNet, "%s %s %s:%u: %s", component, what, file, line, text);
  }
  return UCS_LOG_FUNC_RC_STOP;
}

// UCX's settings for a host process (host_settings.h) are in the environment only while libucs's
// constructor reads them, inside the dlopen of libucp; a UCX the host loaded itself is left as it
// is (its constructor ran before).
std::vector<std::string> settings_for_load() {
  if (void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD)) {
    dlclose(ucs);
    SCCL_INFO(kLogNet,
              "UCX was loaded before SketchCCL: its memory hooks and signal handlers are "
              "as the process set them");
    return {};
  }
  return ucx_host_settings([](const char* name) -> const char* { return std::getenv(name); });
}

void* open_libucp(std::string* error) {
  std::vector<std::string> candidates{"libucp.so.0"};
  const std::string configured_dir = SKETCHCCL_UCX_LIBDIR;  // HPC-X is off the default path
  if (!configured_dir.empty()) candidates.push_back(configured_dir + "/libucp.so.0");
  const std::vector<std::string> settings = settings_for_load();
  std::string tried;
  for (const std::string& candidate : candidates) {
    void* h = nullptr;
    {
      ScopedEnvironment env(settings);
      h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (h != nullptr) {
      std::string list;
      for (const std::string& s : settings)
        list += (list.empty() ? "" : " ") + s;
      if (!list.empty()) SCCL_INFO(kLogNet, "UCX loaded with %s (docs/transport.md)", list.c_str());
      return h;
    }
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + (why != nullptr ? std::string(why) : candidate);
  }
  *error = "cannot load libucp.so.0 (" + tried + ")";
  return nullptr;
}

Loaded load() {
  Loaded l;
  void* h = open_libucp(&l.error);
  if (h == nullptr) return l;
  UcxApi& a = l.api;
  std::string missing;
#define SCCL_UCX_BIND(name) bind(h, #name, &a.name, &missing)
  SCCL_UCX_BIND(ucp_get_version);
  SCCL_UCX_BIND(ucp_config_read);
  SCCL_UCX_BIND(ucp_config_release);
  SCCL_UCX_BIND(ucp_config_modify);
  SCCL_UCX_BIND(ucp_init_version);
  SCCL_UCX_BIND(ucp_cleanup);
  SCCL_UCX_BIND(ucp_worker_create);
  SCCL_UCX_BIND(ucp_worker_destroy);
  SCCL_UCX_BIND(ucp_worker_get_address);
  SCCL_UCX_BIND(ucp_worker_release_address);
  SCCL_UCX_BIND(ucp_worker_progress);
  SCCL_UCX_BIND(ucp_ep_create);
  SCCL_UCX_BIND(ucp_ep_print_info);
  SCCL_UCX_BIND(ucp_ep_close_nbx);
  SCCL_UCX_BIND(ucp_tag_send_nbx);
  SCCL_UCX_BIND(ucp_tag_recv_nbx);
  SCCL_UCX_BIND(ucp_tag_probe_nb);
  SCCL_UCX_BIND(ucp_request_check_status);
  SCCL_UCX_BIND(ucp_request_cancel);
  SCCL_UCX_BIND(ucp_request_free);
  SCCL_UCX_BIND(ucs_status_string);
  SCCL_UCX_BIND(ucs_log_push_handler);
#undef SCCL_UCX_BIND
  bind(h, "ucs_global_opts", &a.global_opts, &missing);
  Dl_info info{};
  a.path =
      dladdr(reinterpret_cast<void*>(a.ucp_init_version), &info) != 0 && info.dli_fname != nullptr
          ? info.dli_fname
          : "libucp.so.0";
  if (!missing.empty()) {
    // Kept loaded: UCX's constructors have run, and unloading them is not safe.
    l.error = a.path + " lacks " + missing + " (UCX older than 1.10?)";
    return l;
  }
  a.ucs_log_push_handler(log_to_sketchccl);
  unsigned major = 0, minor = 0, release = 0;
  a.ucp_get_version(&major, &minor, &release);
  SCCL_INFO(kLogNet, "UCX %u.%u.%u loaded from %s", major, minor, release, a.path.c_str());
  l.ok = true;
  return l;
}

}  // namespace

const UcxApi* load_ucx_api(std::string* error) {
  static const Loaded loaded = load();  // once, on the first caller's thread
  if (!loaded.ok) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace sketchccl::transport
