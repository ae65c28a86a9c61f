// A fake libnccl.so.2 for checking what SketchCCL forwards. It implements the nccl.h functions
// (and the device API's host functions, when the nccl.h built against has them) on host memory
// without communicating, appends one line per call with its arguments to
// $FAKE_NCCL_LOG, and, as the real library does, calls some of its own exported functions
// through the PLT (ncclGetUniqueId from ncclCommInitAll, ncclBroadcast from ncclBcast,
// ncclCommGetAsyncError from init and enqueue), so a preloaded shim sees those calls too.
// Forwarded collectives copy sendbuff to recvbuff: their result is recognisably not a sum.
//
// As strict as NCCL 2.28.9 where a caller can tell (src/init.cc, src/group.cc, src/enqueue.cc
// at v2.28.9-1):
// - A communicator is nonblocking when its config says blocking=0 (NCCL_COMM_BLOCKING=0|1 overrides
//   the config, as envConfigOverride does); a split with a NULL config inherits its parent's.
// - Nonblocking init returns ncclInProgress with *comm already set (init.cc:2001); it becomes
//   ready later, on another thread; ncclCommGetAsyncError says ncclInProgress until then.
// - Nonblocking split returns ncclSuccess with *newcomm NULL (init.cc:2572, 2666-2679); another
//   thread writes *newcomm when the child is ready (init.cc:1612-1614); the parent's async error
//   is ncclInProgress until then (group.cc:711).
// - A collective on a nonblocking communicator returns ncclInProgress and its async error stays
//   ncclInProgress until it has been launched (group.cc:724-738, enqueue.cc:2658).
// - Using a communicator whose async error is ncclInProgress (count, device, rank, collectives,
//   split, finalize) fails with ncclInvalidArgument and the last error "Attempt to use
//   communicator before the previous operation returned ncclSuccess" (init.cc:373-390).
// - Inside ncclGroupStart/End, init and split are deferred to the group's end: ncclCommCuDevice
//   answers 0 until then (the device is set by commAlloc at the group's end, init.cc:438), and a
//   split's *newcomm stays NULL. The device is the caller's current one at init: here
//   FAKE_NCCL_DEVICE (3 unless set), as no CUDA runs.
//
// Personalities: built with -DFAKE_NCCL_VERSION=V (22809 unless set: the nccl.h at hand), it is
// the NCCL of that release to a caller: ncclGetVersion answers V and it exports exactly the
// functions NCCL had by then (src/api/nccl_api.def's `since`), the *Config calls read a
// ncclCollConfig_t of that release's size (64 bytes in 2.31, 72 in 2.32). The 2.32 personality
// exports ncclSetEncryption without a pnccl twin. Since 2.28.7 a revoked communicator's
// collectives fail (ncclInvalidUsage); since 2.29.7 a suspended one's do, until its resume.
#include <nccl.h>
#include <unistd.h>

#include "sketchccl_build_config.h"
#include "src/api/nccl_compat.h"

#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION NCCL_VERSION_CODE
#endif
#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define FAKE_API(ret, name, ...)                                                                   \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                      \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__); \
  extern "C" ret p##name(__VA_ARGS__)

namespace {

// What threads share about a communicator (and keep after its destroy).
struct Shared {
  std::atomic<int> async{ncclSuccess};  // what ncclCommGetAsyncError answers
  std::atomic<int> cuda_dev{0};         // set when the init has run (commAlloc)
  std::atomic<bool> revoked{false};     // ncclCommRevoke: its collectives fail from now on
  std::atomic<bool> suspended{false};   // between ncclCommSuspend and ncclCommResume
};

struct FakeComm {
  uint32_t magic = 0xfa4ec033;
  int rank = 0;
  int nranks = 1;
  int blocking = 1;
  std::shared_ptr<Shared> s = std::make_shared<Shared>();
};

constexpr int kReadyAfterMs = 100;    // a nonblocking init or split
constexpr int kLaunchedAfterMs = 20;  // a nonblocking collective or group

std::mutex g_mu;
std::atomic<int> g_next_op{ncclNumOps};
char g_last_error[256] = "fake last error";  // process-wide, as NCCL's ncclLastError

// A deferred init or split: run at the outermost ncclGroupEnd (at once if the group is blocking,
// else later on another thread, the communicator `s` in progress meanwhile).
struct Job {
  std::shared_ptr<Shared> s;
  std::function<void()> run;
};
thread_local int t_depth = 0;
thread_local int t_group_blocking = -1;  // -1: no communicator in the group yet
thread_local std::vector<Job> t_jobs;
thread_local std::vector<std::shared_ptr<Shared>> t_group_comms;  // nonblocking collectives

FakeComm* as_fake(ncclComm_t comm) {
  auto* c = reinterpret_cast<FakeComm*>(comm);
  return c != nullptr && c->magic == 0xfa4ec033 ? c : nullptr;
}

void log_call(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_call(const char* fmt, ...) {
  const char* path = std::getenv("FAKE_NCCL_LOG");
  if (path == nullptr) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line);
    std::fclose(f);
  }
}

void set_last_error(const char* text) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::snprintf(g_last_error, sizeof g_last_error, "%s", text);
}

// Runs `fn` on another thread after `ms` milliseconds.
void later(int ms, std::function<void()> fn) {
  std::thread([ms, fn = std::move(fn)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    fn();
  }).detach();
}

// The caller's current CUDA device, as NCCL's cudaGetDevice at init.
int current_device() {
  const char* env = std::getenv("FAKE_NCCL_DEVICE");
  return env != nullptr && *env != '\0' ? std::atoi(env) : 3;
}

// The blocking mode NCCL gives a communicator: the config's field when the caller's size holds
// it and it is set, else `inherited` (a split without config) or 1; NCCL_COMM_BLOCKING=0|1 wins.
int blocking_of(const ncclConfig_t* config, int inherited) {
  int b = inherited >= 0 ? inherited : 1;
  if (config != nullptr) {
    b = 1;
    size_t size = 0;
    std::memcpy(&size, config, sizeof size);
    if (size >= offsetof(ncclConfig_t, blocking) + sizeof(int) &&
        config->blocking != NCCL_CONFIG_UNDEF_INT) {
      b = config->blocking;
    }
  }
  const char* env = std::getenv("NCCL_COMM_BLOCKING");
  if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0))
    b = std::atoi(env);
  return b;
}

// ncclCommEnsureReady: a communicator still in progress may not be used.
ncclResult_t ensure_ready(FakeComm* c) {
  if (c == nullptr) return ncclInvalidArgument;
  const int async = c->s->async.load(std::memory_order_acquire);
  if (async == ncclInProgress) {
    set_last_error(
        "Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  return static_cast<ncclResult_t>(async);
}

// A group may not mix blocking and nonblocking communicators (group.cc:51-58).
ncclResult_t join_group(const FakeComm* c) {
  if (t_group_blocking == -1) t_group_blocking = c->blocking;
  if (t_group_blocking != c->blocking) {
    set_last_error("Blocking and nonblocking communicators are not allowed in the same group.");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

// An init or split's work `run` for communicator state `s` in blocking mode `blocking`: deferred
// inside a group, else at once (blocking) or later on another thread (nonblocking).
ncclResult_t launch(FakeComm* owner, std::function<void()> run) {
  if (t_depth > 0) {
    ncclResult_t r = join_group(owner);
    if (r != ncclSuccess) return r;
    t_jobs.push_back({owner->s, std::move(run)});
    return ncclSuccess;
  }
  if (owner->blocking) {
    run();
    return ncclSuccess;
  }
  auto s = owner->s;
  s->async.store(ncclInProgress, std::memory_order_release);
  later(kReadyAfterMs, [s, run = std::move(run)] {
    run();
    s->async.store(ncclSuccess, std::memory_order_release);
  });
  return ncclSuccess;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

void copy(const void* src, void* dst, size_t count, ncclDataType_t t) {
  if (src != nullptr && dst != nullptr && src != dst) std::memmove(dst, src, count * type_size(t));
}

ncclResult_t init_comm(ncclComm_t* comm, int nranks, int rank, int blocking) {
  if (comm == nullptr) return ncclInvalidArgument;
  auto* c = new FakeComm();
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  *comm = reinterpret_cast<ncclComm_t>(c);  // at once, before the init has run (init.cc:2001)
  const int dev = current_device();
  ncclResult_t r = launch(c, [s = c->s, dev] { s->cuda_dev.store(dev); });
  if (r != ncclSuccess) return r;
  ncclResult_t async = ncclSuccess;
  r = ncclCommGetAsyncError(*comm, &async);  // through the PLT, as NCCL's init does
  if (r != ncclSuccess) return r;
  return t_depth == 0 && !blocking ? async : ncclSuccess;
}

// A child of `parent` (split or shrink) of `nranks`: *newcomm NULL until it is ready.
ncclResult_t child_comm(FakeComm* parent, bool none, int nranks, ncclComm_t* newcomm,
                        ncclConfig_t* config) {
  if (parent == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  ncclResult_t r = ensure_ready(parent);
  if (r != ncclSuccess) return r;
  *newcomm = nullptr;
  const int blocking = blocking_of(config, config == nullptr ? parent->blocking : -1);
  const int rank = parent->rank < nranks ? parent->rank : 0;
  const int dev = parent->s->cuda_dev.load();
  // The group's mode is the parent's (ncclAsyncLaunch is given the parent, group.cc:56).
  return launch(parent, [newcomm, none, nranks, rank, blocking, dev] {
    if (none) return;
    auto* c = new FakeComm();
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = blocking;
    c->s->cuda_dev.store(dev);
    __atomic_store_n(newcomm, reinterpret_cast<ncclComm_t>(c), __ATOMIC_RELEASE);
  });
}

// A collective's enqueue on `comm`: refused before it is ready; inside a group it joins the
// group; a nonblocking communicator's is in progress until launched.
ncclResult_t enqueue(ncclComm_t comm) {
  FakeComm* c = as_fake(comm);
  ncclResult_t r = ensure_ready(c);
  if (r != ncclSuccess) return r;
  if (c->s->revoked.load() || c->s->suspended.load()) {
    set_last_error(c->s->revoked.load() ? "communicator was revoked" : "communicator is suspended");
    return ncclInvalidUsage;
  }
  if (t_depth > 0) {
    r = join_group(c);
    if (r == ncclSuccess && !c->blocking) t_group_comms.push_back(c->s);
    return r;
  }
  ncclResult_t async = ncclSuccess;
  r = ncclCommGetAsyncError(comm, &async);  // through the PLT, as NCCL's enqueue does
  if (r != ncclSuccess || c->blocking) return r;
  auto s = c->s;
  s->async.store(ncclInProgress, std::memory_order_release);
  later(kLaunchedAfterMs, [s] { s->async.store(ncclSuccess, std::memory_order_release); });
  return ncclInProgress;
}

// A collective that moves data: the fake copies sendbuff to recvbuff once it is enqueued.
ncclResult_t copying(ncclComm_t comm, const void* src, void* dst, size_t count, ncclDataType_t t) {
  ncclResult_t r = enqueue(comm);
  if (r == ncclSuccess || r == ncclInProgress) copy(src, dst, count, t);
  return r;
}

}  // namespace

FAKE_API(ncclResult_t, ncclGetVersion, int* version) {
  log_call("ncclGetVersion");
  *version = FAKE_NCCL_VERSION;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* id) {
  log_call("ncclGetUniqueId");
  std::memset(id->internal, 0, sizeof id->internal);
  FILE* r = std::fopen("/dev/urandom", "rb");
  if (r == nullptr || std::fread(id->internal, 1, 40, r) != 40) {
    if (r) std::fclose(r);
    return ncclSystemError;
  }
  std::fclose(r);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  log_call("ncclCommInitRank nranks=%d rank=%d id0=%02x", nranks, rank,
           static_cast<unsigned char>(id.internal[0]));
  return init_comm(comm, nranks, rank, blocking_of(nullptr, -1));
}

FAKE_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId id,
         int rank, ncclConfig_t* config) {
  log_call("ncclCommInitRankConfig nranks=%d rank=%d id0=%02x blocking=%d", nranks, rank,
           static_cast<unsigned char>(id.internal[0]), config ? config->blocking : -1);
  return init_comm(comm, nranks, rank, blocking_of(config, -1));
}

FAKE_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* comm, int nranks, int myrank, int nId,
         ncclUniqueId* ids, ncclConfig_t* config) {
  log_call("ncclCommInitRankScalable nranks=%d rank=%d nId=%d config=%p", nranks, myrank, nId,
           static_cast<void*>(config));
  (void)ids;
  return init_comm(comm, nranks, myrank, blocking_of(config, -1));
}

FAKE_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  log_call("ncclCommInitAll ndev=%d devlist=%p", ndev, static_cast<const void*>(devlist));
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);  // through the PLT, as NCCL does
  if (r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) {
    auto* c = new FakeComm();
    c->rank = i;
    c->nranks = ndev;
    c->s->cuda_dev.store(devlist != nullptr ? devlist[i] : i);
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  log_call("ncclCommFinalize comm=%p", static_cast<void*>(comm));
  FakeComm* c = as_fake(comm);
  ncclResult_t r = ensure_ready(c);
  if (r != ncclSuccess || c->blocking) return r;
  auto s = c->s;
  s->async.store(ncclInProgress, std::memory_order_release);
  later(kLaunchedAfterMs, [s] { s->async.store(ncclSuccess, std::memory_order_release); });
  return ncclInProgress;
}

FAKE_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  log_call("ncclCommDestroy comm=%p", static_cast<void*>(comm));
  delete as_fake(comm);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  log_call("ncclCommAbort comm=%p", static_cast<void*>(comm));
  delete as_fake(comm);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int flags) {
  log_call("ncclCommRevoke comm=%p flags=%d", static_cast<void*>(comm), flags);
  FakeComm* c = as_fake(comm);
  if (c == nullptr) return ncclInvalidArgument;
  c->s->revoked.store(true);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
         ncclConfig_t* config) {
  log_call("ncclCommSplit comm=%p color=%d key=%d config=%p", static_cast<void*>(comm), color, key,
           static_cast<void*>(config));
  // Sizes are not faked precisely: the child has the parent's.
  FakeComm* parent = as_fake(comm);
  return child_comm(parent, color == NCCL_SPLIT_NOCOLOR, parent != nullptr ? parent->nranks : 0,
                    newcomm, config);
}

FAKE_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* exclude, int nexclude,
         ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  log_call("ncclCommShrink comm=%p exclude=%p n=%d config=%p flags=%d", static_cast<void*>(comm),
           static_cast<void*>(exclude), nexclude, static_cast<void*>(config), flags);
  FakeComm* parent = as_fake(comm);
  return child_comm(parent, false, parent != nullptr ? parent->nranks - nexclude : 0, newcomm,
                    config);
}

FAKE_API(const char*, ncclGetErrorString, ncclResult_t result) {
  log_call("ncclGetErrorString result=%d", static_cast<int>(result));
  static thread_local char text[64];
  std::snprintf(text, sizeof text, "fake error string %d", static_cast<int>(result));
  return text;
}

FAKE_API(const char*, ncclGetLastError, ncclComm_t comm) {
  log_call("ncclGetLastError comm=%p", static_cast<void*>(comm));
  return g_last_error;
}

FAKE_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* err) {
  log_call("ncclCommGetAsyncError comm=%p", static_cast<void*>(comm));
  FakeComm* c = as_fake(comm);
  if (c == nullptr || err == nullptr) return ncclInvalidArgument;
  *err = static_cast<ncclResult_t>(c->s->async.load(std::memory_order_acquire));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  log_call("ncclCommCount comm=%p", static_cast<void*>(comm));
  FakeComm* c = as_fake(comm);
  ncclResult_t r = ensure_ready(c);
  if (r != ncclSuccess) return r;
  *count = c->nranks;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  log_call("ncclCommCuDevice comm=%p", static_cast<void*>(comm));
  FakeComm* c = as_fake(comm);
  ncclResult_t r = ensure_ready(c);
  if (r != ncclSuccess) return r;
  *device = c->s->cuda_dev.load();  // 0 while its init waits for the group's end
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  log_call("ncclCommUserRank comm=%p", static_cast<void*>(comm));
  FakeComm* c = as_fake(comm);
  ncclResult_t r = ensure_ready(c);
  if (r != ncclSuccess) return r;
  *rank = c->rank;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  log_call("ncclMemAlloc size=%zu", size);
  *ptr = std::malloc(size);
  return *ptr ? ncclSuccess : ncclSystemError;
}

FAKE_API(ncclResult_t, ncclMemFree, void* ptr) {
  log_call("ncclMemFree ptr=%p", ptr);
  std::free(ptr);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
         void** handle) {
  log_call("ncclCommRegister comm=%p buff=%p size=%zu", static_cast<void*>(comm), buff, size);
  *handle = buff;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  log_call("ncclCommDeregister comm=%p handle=%p", static_cast<void*>(comm), handle);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
         ncclWindow_t* win, int flags) {
  log_call("ncclCommWindowRegister comm=%p buff=%p size=%zu flags=%d", static_cast<void*>(comm),
           buff, size, flags);
  *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  log_call("ncclCommWindowDeregister comm=%p win=%p", static_cast<void*>(comm),
           static_cast<void*>(win));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
         ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  log_call("ncclRedOpCreatePreMulSum scalar=%p datatype=%d residence=%d comm=%p", scalar,
           static_cast<int>(datatype), static_cast<int>(residence), static_cast<void*>(comm));
  *op = static_cast<ncclRedOp_t>(g_next_op++);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  log_call("ncclRedOpDestroy op=%d comm=%p", static_cast<int>(op), static_cast<void*>(comm));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclReduce, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclReduce send=%p recv=%p count=%zu type=%d op=%d root=%d comm=%p stream=%p", s, r,
           count, static_cast<int>(t), static_cast<int>(op), root, static_cast<void*>(comm),
           static_cast<void*>(stream));
  return copying(comm, s, r, count, t);
}

FAKE_API(ncclResult_t, ncclBroadcast, const void* s, void* r, size_t count, ncclDataType_t t,
         int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclBroadcast send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return copying(comm, s, r, count, t);
}

FAKE_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t t, int root,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclBcast buff=%p count=%zu type=%d root=%d comm=%p stream=%p", buff, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return ncclBroadcast(buff, buff, count, t, root, comm, stream);  // through the PLT, as NCCL does
}

FAKE_API(ncclResult_t, ncclAllReduce, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAllReduce send=%p recv=%p count=%zu type=%d op=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<int>(op), static_cast<void*>(comm),
           static_cast<void*>(stream));
  return copying(comm, s, r, count, t);
}

FAKE_API(ncclResult_t, ncclReduceScatter, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclReduceScatter send=%p recv=%p count=%zu type=%d op=%d comm=%p stream=%p", s, r,
           count, static_cast<int>(t), static_cast<int>(op), static_cast<void*>(comm),
           static_cast<void*>(stream));
  return copying(comm, s, r, count, t);
}

FAKE_API(ncclResult_t, ncclAllGather, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAllGather send=%p recv=%p count=%zu type=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<void*>(comm), static_cast<void*>(stream));
  return copying(comm, s, r, count, t);
}

FAKE_API(ncclResult_t, ncclAlltoAll, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAlltoAll send=%p recv=%p count=%zu type=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue(comm);
}

FAKE_API(ncclResult_t, ncclGather, const void* s, void* r, size_t count, ncclDataType_t t, int root,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclGather send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue(comm);
}

FAKE_API(ncclResult_t, ncclScatter, const void* s, void* r, size_t count, ncclDataType_t t,
         int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclScatter send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue(comm);
}

FAKE_API(ncclResult_t, ncclSend, const void* s, size_t count, ncclDataType_t t, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclSend send=%p count=%zu type=%d peer=%d comm=%p stream=%p", s, count,
           static_cast<int>(t), peer, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue(comm);
}

FAKE_API(ncclResult_t, ncclRecv, void* r, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  log_call("ncclRecv recv=%p count=%zu type=%d peer=%d comm=%p stream=%p", r, count,
           static_cast<int>(t), peer, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue(comm);
}

FAKE_API(ncclResult_t, ncclGroupStart, void) {
  log_call("ncclGroupStart");
  ++t_depth;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGroupEnd, void) {
  log_call("ncclGroupEnd");
  if (t_depth == 0) return ncclInvalidUsage;
  if (--t_depth > 0) return ncclSuccess;
  std::vector<Job> jobs;
  jobs.swap(t_jobs);
  std::vector<std::shared_ptr<Shared>> comms;
  comms.swap(t_group_comms);
  const bool blocking = t_group_blocking != 0;
  t_group_blocking = -1;
  if (blocking) {
    for (Job& j : jobs)
      j.run();
    return ncclSuccess;
  }
  if (jobs.empty() && comms.empty()) return ncclSuccess;
  // A nonblocking group: launched on another thread, its communicators in progress meanwhile.
  for (Job& j : jobs)
    j.s->async.store(ncclInProgress, std::memory_order_release);
  for (auto& c : comms)
    c->async.store(ncclInProgress, std::memory_order_release);
  later(kReadyAfterMs, [jobs = std::move(jobs), comms = std::move(comms)] {
    for (const Job& j : jobs)
      j.run();
    for (const Job& j : jobs)
      j.s->async.store(ncclSuccess, std::memory_order_release);
    for (auto& c : comms)
      c->async.store(ncclSuccess, std::memory_order_release);
  });
  return ncclInProgress;
}

FAKE_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* info) {
  log_call("ncclGroupSimulateEnd info=%p", static_cast<void*>(info));
  return ncclSuccess;
}

FAKE_API(void, ncclResetDebugInit, void) {
  log_call("ncclResetDebugInit");
}

// No twin, as in the real library.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  log_call("ncclResetDebugInitInternal");
}

#include "tests/fake_nccl/fake_nccl_since_2_29.inc"

#if SKETCHCCL_NCCL_DEVICE_API
// The device API's host functions: each logs its arguments and answers with values derived from
// them, so that a caller can tell its answer came back unchanged.
FAKE_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
         ncclDevComm_t* out) {
  log_call("ncclDevCommCreate comm=%p reqs=%p out=%p", static_cast<void*>(comm),
           static_cast<const void*>(reqs), static_cast<void*>(out));
  return reqs == nullptr ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm) {
  log_call("ncclDevCommDestroy comm=%p devComm=%p", static_cast<void*>(comm),
           static_cast<const void*>(devComm));
  return ncclSuccess;
}

FAKE_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm) {
  log_call("ncclTeamWorld comm=%p", static_cast<void*>(comm));
  auto* c = reinterpret_cast<FakeComm*>(comm);
  return {c->nranks, c->rank, 1};
}

FAKE_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm) {
  log_call("ncclTeamLsa comm=%p", static_cast<void*>(comm));
  return {1, 0, 2};
}

FAKE_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm) {
  log_call("ncclTeamRail comm=%p", static_cast<void*>(comm));
  auto* c = reinterpret_cast<FakeComm*>(comm);
  return {c->nranks, c->rank, 3};
}

FAKE_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank) {
  log_call("ncclTeamRankToWorld comm=%p team=%d,%d,%d rank=%d", static_cast<void*>(comm),
           team.nRanks, team.rank, team.stride, rank);
  return team.stride * 100 + rank;
}

FAKE_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank) {
  log_call("ncclTeamRankToLsa comm=%p team=%d,%d,%d rank=%d", static_cast<void*>(comm), team.nRanks,
           team.rank, team.stride, rank);
  return team.nRanks * 1000 + rank;
}

FAKE_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers,
         ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclLsaBarrierCreateRequirement team=%d,%d,%d n=%d handle=%p req=%p", team.nRanks,
           team.rank, team.stride, nBarriers, static_cast<void*>(outHandle),
           static_cast<void*>(outReq));
  return nBarriers < 0 ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team,
         int nBarriers, ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclGinBarrierCreateRequirement comm=%p team=%d,%d,%d n=%d handle=%p req=%p",
           static_cast<void*>(comm), team.nRanks, team.rank, team.stride, nBarriers,
           static_cast<void*>(outHandle), static_cast<void*>(outReq));
  return nBarriers < 0 ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  log_call("ncclLLA2ACalcSlots maxElts=%d maxEltSize=%d", maxElts, maxEltSize);
  return maxElts * maxEltSize + 5;
}

FAKE_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots,
         ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclLLA2ACreateRequirement blocks=%d slots=%d handle=%p req=%p", nBlocks, nSlots,
           static_cast<void*>(outHandle), static_cast<void*>(outReq));
  return ncclSuccess;
}
#endif
