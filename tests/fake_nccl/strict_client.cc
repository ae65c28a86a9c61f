// The fake libnccl.so.2 alone (no SketchCCL): it behaves as NCCL 2.28.9 does where the callers
// can tell, so that the interposer's tests meet what a real job meets. Each check names the
// NCCL source it follows (NVIDIA/nccl at v2.28.9-1). Prints "CHECK <name> OK|FAIL"; exits 1 on
// any FAIL.
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/fake_nccl/client_util.h"

namespace {

using fake_client::check;

ncclComm_t load(ncclComm_t* slot) {
  return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

// Polls ncclCommGetAsyncError until it leaves ncclInProgress (as PyTorch's waitReady); returns
// the last answer.
ncclResult_t poll_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 1000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return async;
}

ncclComm_t nonblocking_init() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) std::exit(3);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  // init.cc:2001 sets *newcomm before the init runs; :2163-2166 returns the async state.
  check("nonblocking-init/in-progress-with-comm-set", r == ncclInProgress && comm != nullptr,
        "result " + std::to_string(r));
  ncclResult_t async = ncclSuccess;
  check("nonblocking-init/async-in-progress",
        ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInProgress);
  // init.cc:373-390: any use before it is ready fails, with NCCL's WARN as the last error.
  int n = -1, dev = -1;
  r = ncclCommCount(comm, &n);
  const std::string text = ncclGetLastError(comm);
  check(
      "use-before-ready/count-refused",
      r == ncclInvalidArgument &&
          text == "Attempt to use communicator before the previous operation returned ncclSuccess",
      "result " + std::to_string(r) + ", last error '" + text + "'");
  check("use-before-ready/device-refused", ncclCommCuDevice(comm, &dev) == ncclInvalidArgument);
  float x = 1.0f, y = 0.0f;
  check("use-before-ready/allreduce-refused",
        ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  check("nonblocking-init/ready-later", poll_ready(comm) == ncclSuccess);
  r = ncclCommCuDevice(comm, &dev);
  check("nonblocking-init/device-is-the-current-one", r == ncclSuccess && dev == 5,
        "device " + std::to_string(dev));
  return comm;
}

void nonblocking_calls(ncclComm_t comm) {
  // enqueue.cc:2652-2659, group.cc:707-738: a nonblocking communicator's collective is in
  // progress until its group has launched.
  float x = 1.0f, y = 0.0f;
  ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, nullptr);
  check("nonblocking-collective/in-progress", r == ncclInProgress, "result " + std::to_string(r));
  check("nonblocking-collective/done-later", poll_ready(comm) == ncclSuccess);

  // init.cc:2571-2572: *newcomm is NULL until the split is done; ncclCommSplit itself returns
  // InitChildComm's ncclSuccess (init.cc:2666-2679; NCCLCHECK passes ncclInProgress on,
  // checks.h:122-129); group.cc:711 puts the parent in progress; init.cc:1612-1614 writes
  // *newcomm from NCCL's thread.
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  r = ncclCommSplit(comm, 0, 0, &child, nullptr);
  check("nonblocking-split/success-with-newcomm-null", r == ncclSuccess && child == nullptr,
        "result " + std::to_string(r));
  ncclResult_t async = ncclSuccess;
  check("nonblocking-split/parent-in-progress",
        ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclInProgress);
  ncclComm_t ready = nullptr;
  for (int i = 0; i < 1000 && ready == nullptr; ++i) {
    ready = load(&child);
    if (ready == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  check("nonblocking-split/newcomm-written-later", ready != nullptr);
  check("nonblocking-split/parent-ready-after", poll_ready(comm) == ncclSuccess);
  // copyCommConfig (init.cc:1798-1802): a NULL config inherits the parent's, nonblocking here.
  r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, ready, nullptr);
  check("split-child/inherits-nonblocking", r == ncclInProgress, "result " + std::to_string(r));
  (void)poll_ready(ready);
  // group.cc:51-58: one group never mixes blocking and nonblocking communicators.
  ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
  blocking.blocking = 1;
  ncclComm_t b = nullptr;
  ncclUniqueId id;
  (void)ncclGetUniqueId(&id);
  (void)ncclCommInitRankConfig(&b, 1, id, 0, &blocking);
  ncclGroupStart();
  ncclResult_t r1 = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, ready, nullptr);
  ncclResult_t r2 = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, b, nullptr);
  ncclResult_t r3 = ncclGroupEnd();
  check("group/blocking-and-nonblocking-refused", r1 == ncclSuccess && r2 == ncclInvalidUsage,
        "results " + std::to_string(r1) + " " + std::to_string(r2) + " " + std::to_string(r3));
  (void)poll_ready(ready);
  ncclCommDestroy(b);
  ncclCommDestroy(ready);
}

void grouped_init() {
  // init.cc:1984-2001 and group.cc: an init inside a group runs at its end; until then the
  // communicator exists, its async error is ncclSuccess, and its device is commAlloc's, not yet
  // set (init.cc:438): ncclCommCuDevice answers 0.
  ncclUniqueId id;
  (void)ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  ncclGroupStart();
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, nullptr);
  int dev = -1;
  ncclResult_t rd = ncclCommCuDevice(comm, &dev);
  check("grouped-init/device-0-inside-the-group", r == ncclSuccess && rd == ncclSuccess && dev == 0,
        "device " + std::to_string(dev));
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  ncclGroupEnd();
  ncclGroupStart();
  r = ncclCommSplit(comm, 0, 0, &child, nullptr);
  check("grouped-split/newcomm-null-inside-the-group", r == ncclSuccess && child == nullptr);
  ncclGroupEnd();
  check("grouped-split/newcomm-set-at-the-end", load(&child) != nullptr);
  r = ncclCommCuDevice(comm, &dev);
  check("grouped-init/device-after-the-group", r == ncclSuccess && dev == 5,
        "device " + std::to_string(dev));
  ncclCommDestroy(child);
  ncclCommDestroy(comm);
}

void env_override() {
  // envConfigOverride (init.cc:1646-1649): NCCL_COMM_BLOCKING=0|1 wins over the config.
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  ncclUniqueId id;
  (void)ncclGetUniqueId(&id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  check("env/NCCL_COMM_BLOCKING-overrides-the-config", r == ncclInProgress,
        "result " + std::to_string(r));
  (void)poll_ready(comm);
  unsetenv("NCCL_COMM_BLOCKING");
  ncclCommDestroy(comm);
}

}  // namespace

int main() {
  alarm(60);
  setenv("FAKE_NCCL_DEVICE", "5", 1);
  unsetenv("NCCL_COMM_BLOCKING");
  ncclComm_t comm = nonblocking_init();
  nonblocking_calls(comm);
  ncclCommDestroy(comm);
  grouped_init();
  env_override();
  return fake_client::g_fails ? 1 : 0;
}
