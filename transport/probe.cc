#include "transport/probe.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_UCX
#include "transport/ucx/ucx_api.h"
#endif

namespace sketchccl::transport {
namespace {

TransportProbe probe_ucx() {
  TransportProbe p{"ucx", false, false, "configure with -Ducx=enabled and libucx-dev"};
#if SKETCHCCL_HAVE_UCX
  p.compiled = true;
  std::string why;
  const UcxApi* api = load_ucx_api(&why);
  if (api == nullptr) {
    p.detail = why;
    return p;
  }
  unsigned major = 0, minor = 0, release = 0;
  api->ucp_get_version(&major, &minor, &release);
  std::string version =
      "UCX " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
  ucp_config_t* config = nullptr;
  ucs_status_t st = api->ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    p.detail = version + ": ucp_config_read failed: " + api->ucs_status_string(st);
    return p;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h ctx = nullptr;
  st = api->ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &ctx);
  api->ucp_config_release(config);
  if (st != UCS_OK) {
    p.detail = version + ": ucp_init failed: " + api->ucs_status_string(st);
    return p;
  }
  api->ucp_cleanup(ctx);
  p.works = true;
  p.detail = version;
#endif
  return p;
}

TransportProbe probe_socket() {
  TransportProbe p{"socket", true, false, ""};
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    p.detail = std::string("socket() failed: ") + std::strerror(errno);
    return p;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1) != 0) {
    p.detail = std::string("cannot listen on loopback: ") + std::strerror(errno);
  } else {
    p.works = true;
    p.detail = "TCP";
  }
  ::close(fd);
  return p;
}

// No verbs transport is built yet; the probe only reports whether one could run here. It loads
// libibverbs at run time so that nothing links against it.
TransportProbe probe_ibverbs() {
  TransportProbe p{"ibverbs", false, false, "no verbs transport yet"};
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    p.detail += "; libibverbs not found";
    return p;
  }
  // The three calls of the probe, with their libibverbs signatures over opaque device pointers.
  using GetList = void** (*)(int*);
  using GetName = const char* (*)(void*);
  using FreeList = void (*)(void**);
  auto get_list = reinterpret_cast<GetList>(dlsym(lib, "ibv_get_device_list"));
  auto get_name = reinterpret_cast<GetName>(dlsym(lib, "ibv_get_device_name"));
  auto free_list = reinterpret_cast<FreeList>(dlsym(lib, "ibv_free_device_list"));
  if (get_list == nullptr || get_name == nullptr || free_list == nullptr) {
    p.detail += "; libibverbs lacks ibv_get_device_list";
  } else {
    int n = 0;
    errno = 0;
    void** list = get_list(&n);
    if (list == nullptr) {
      p.detail += std::string("; no device: ibv_get_device_list failed: ") + std::strerror(errno);
    } else {
      p.detail += n == 0 ? std::string("; no device: ibv_get_device_list found none")
                         : "; device " + std::string(get_name(list[0])) + " found";
      free_list(list);
    }
  }
  dlclose(lib);
  return p;
}

}  // namespace

std::vector<TransportProbe> probe_transports() {
  return {probe_ucx(), probe_socket(), probe_ibverbs()};
}

}  // namespace sketchccl::transport
