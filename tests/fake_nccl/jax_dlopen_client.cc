// What XLA's NCCL stub (and TensorFlow's) does: dlopen("libnccl.so.2") and look every function
// up on that handle, never through the global scope that LD_PRELOAD reaches. One rank: id, init,
// a small float AllReduce, SketchCCL's statistics (when the handle is SketchCCL), the device
// API's host functions (which object defines each; one called), destroy.
// Prints "key value" lines for test_jax_shim.sh; exits 1 when a call fails.
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#include <sketchccl/sketchccl.h>
#include "sketchccl_build_config.h"

namespace {

template <typename Fn>
Fn lookup(void* handle, const char* name) {
  Fn fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) std::printf("missing %s\n", name);
  return fn;
}

}  // namespace

int main() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::printf("dlopen_error %s\n", dlerror());
    return 1;
  }
  link_map* map = nullptr;
  dlinfo(h, RTLD_DI_LINKMAP, &map);
  std::printf("opened %s\n", map != nullptr ? map->l_name : "?");
  std::printf("is_sketchccl %d\n", dlsym(h, "sketchcclGetVersion") != nullptr ? 1 : 0);
  auto get_id = lookup<decltype(&ncclGetUniqueId)>(h, "ncclGetUniqueId");
  auto init = lookup<decltype(&ncclCommInitRank)>(h, "ncclCommInitRank");
  auto all_reduce = lookup<decltype(&ncclAllReduce)>(h, "ncclAllReduce");
  auto destroy = lookup<decltype(&ncclCommDestroy)>(h, "ncclCommDestroy");
  if (get_id == nullptr || init == nullptr || all_reduce == nullptr || destroy == nullptr) return 1;
  Dl_info where{};
  dladdr(reinterpret_cast<void*>(all_reduce), &where);
  std::printf("allreduce_in %s\n", where.dli_fname != nullptr ? where.dli_fname : "?");

  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  std::vector<float> buf(16, 1.0f);
  int fails = 0;
  ncclResult_t r = get_id(&id);
  std::printf("get_unique_id %d\n", r);
  fails += r != ncclSuccess;
  r = init(&comm, 1, id, 0);
  std::printf("init %d\n", r);
  if (r != ncclSuccess) return 1;
  r = all_reduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  std::printf("allreduce %d\n", r);
  fails += r != ncclSuccess;
  auto stats =
      reinterpret_cast<decltype(&sketchcclCommGetStats)>(dlsym(h, "sketchcclCommGetStats"));
  if (stats != nullptr) {
    sketchcclCommStats s{};
    s.size = sizeof s;
    r = static_cast<ncclResult_t>(stats(comm, &s));
    std::printf("stats %d forwarded %llu taken %llu\n", r,
                static_cast<unsigned long long>(s.calls_forwarded),
                static_cast<unsigned long long>(s.calls_taken));
  }
#if SKETCHCCL_NCCL_DEVICE_API
  // XLA's stub looks these up too (ncclDevCommCreate for its device communicators).
  for (const char* name :
       {"ncclDevCommCreate", "ncclDevCommDestroy", "ncclTeamWorld", "ncclTeamLsa", "ncclTeamRail",
        "ncclTeamRankToWorld", "ncclTeamRankToLsa", "ncclLsaBarrierCreateRequirement",
        "ncclGinBarrierCreateRequirement", "ncclLLA2ACalcSlots", "ncclLLA2ACreateRequirement"}) {
    void* fn = dlsym(h, name);
    Dl_info in{};
    std::printf("device_api %s in %s\n", name,
                fn != nullptr && dladdr(fn, &in) != 0 && in.dli_fname != nullptr ? in.dli_fname
                                                                                 : "(missing)");
  }
  auto slots = lookup<int (*)(int, int)>(h, "ncclLLA2ACalcSlots");
  if (slots != nullptr) std::printf("lla2a_slots %d\n", slots(6, 8));
#endif
  r = destroy(comm);
  std::printf("destroy %d\n", r);
  fails += r != ncclSuccess;
  return fails == 0 ? 0 : 1;
}
