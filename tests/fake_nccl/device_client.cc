// SketchCCL's device path in front of the fake libnccl.so.2 on a CPU: this program links the
// library's layers itself (not LD_PRELOAD) so that it can install a model of the GPU behind the
// device runtime (src/backend/device_runtime.h; the model: tests/support/model_device.h), then
// calls the NCCL API as a training job does. The model says what CUDA would: the caller's current
// device ($MODEL_DEVICE), which buffers are device memory (the ones this program marks), and it
// runs the staged call's stream operations (copies, flags) in stream order on its hardware
// queues, or fails to ($MODEL_FAIL: prepare, staging, copy; alloc for the ReduceScatter's
// scratch). The real NCCL is the fake, opened through SKETCHCCL_NCCL_LIB; SKETCHCCL_NCCL_LIB=none
// runs standalone. Usage: device_client RANK NRANKS IDFILE MODE (MODE: group, nonblocking, fail,
// hierrs, hierrsflat, hierrsfail, gather, gatherunset, hiergather, hiergatherflat,
// hiergatherfail, suspend: in
// front of a personality of NCCL 2.29.7 or newer;
// shared: standalone).
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "include/sketchccl/sketchccl.h"
#include "src/api/nccl_api.h"
#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"
#include "tests/fake_nccl/client_util.h"
#include "tests/support/model_device.h"

namespace {

using namespace sketchccl;
using namespace sketchccl::backend;
using fake_client::check;
using fake_client::fmt;
using testutil::ModelDevice;

ModelDevice* g_model = nullptr;
int g_device = 0;  // $MODEL_DEVICE: the caller's current device

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int d : v)
    s += (s.empty() ? "" : ",") + std::to_string(d);
  return s.empty() ? "none" : s;
}

// Waits, bounded, until the communicator's async error is no longer ncclInProgress.
ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 3000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return async;
}

constexpr size_t kCount = 1024;

// rank r's input: r + 1 + i % 7; the sum over n ranks: n(n+1)/2 + n (i % 7).
float input(int rank, size_t i) {
  return static_cast<float>(rank + 1) + static_cast<float>(i % 7);
}
bool is_sum(const std::vector<float>& y, int nranks) {
  for (size_t i = 0; i < y.size(); ++i) {
    const float want = static_cast<float>(nranks * (nranks + 1) / 2) +
                       static_cast<float>(nranks) * static_cast<float>(i % 7);
    if (y[i] != want) return false;
  }
  return true;
}

struct Buffers {
  std::vector<float> x, y;
  bool device;
  Buffers(int rank, bool dev) : x(kCount), y(kCount, -1.f), device(dev) {
    for (size_t i = 0; i < kCount; ++i)
      x[i] = input(rank, i);
    if (device) {
      g_model->mark_device(x.data(), kCount * sizeof(float));
      g_model->mark_device(y.data(), kCount * sizeof(float));
    }
  }
  ~Buffers() {
    if (!device) return;
    g_model->unmark(x.data());
    g_model->unmark(y.data());
  }
};

// The device path's work on the model is done once the caller's stream ran everything queued on
// it (the staged call's copy back and last flag included) and the communicator has not failed.
bool device_work_done(ncclComm_t comm, cudaStream_t stream = fake_client::fake_stream(0)) {
  if (!g_model->drain(g_device, stream, 30)) return false;
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 3000 && async == ncclInProgress; ++i) {
    ncclCommGetAsyncError(comm, &async);
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return async == ncclSuccess;
}

// No device runtime call on a proxy thread (the model records any), none counted by SketchCCL.
void check_no_proxy_calls(const std::string& name, ncclComm_t comm) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  sketchcclCommGetStats(comm, &s);
  const auto v = g_model->violations();
  check(name, v.empty() && g_model->proxy_calls() == 0 && g_model->hangs().empty(),
        (v.empty() ? std::string() : v.front()) +
            fmt(" proxy calls %llu, hangs %zu",
                static_cast<unsigned long long>(g_model->proxy_calls()), g_model->hangs().size()));
}

// A communicator initialised inside a user group (as nccl-tests does for every rank), where
// NCCL's ncclCommCuDevice answers 0 until the group ends: the device path is built on the
// caller's current device, and the device AllReduce is taken over.
int run_group(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclGroupStart();
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  const ncclResult_t end = ncclGroupEnd();
  check("group_init", init == ncclSuccess && end == ncclSuccess, fmt("%d %d", init, end));
  Buffers b(rank, true);
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("device_allreduce_returns", r == ncclSuccess, fmt("%d", r));
  check("device_allreduce_done", device_work_done(comm));
  check("device_allreduce_is_the_sum", is_sum(b.y, nranks), fmt("y[0]=%g", b.y[0]));
  const std::string want = std::getenv("MODEL_DEVICE");
  check("prepared_on_the_callers_device", list(g_model->prepare_devices()) == want,
        "prepared on " + list(g_model->prepare_devices()) + ", current device " + want);
  check("staged_on_the_callers_device", list(g_model->staging_devices()) == want,
        "staging allocated on " + list(g_model->staging_devices()) + ", current device " + want);
  check_no_proxy_calls("no_device_call_on_the_proxy", comm);
  ncclCommDestroy(comm);
  return 0;
}

sketchcclCommStats stats_of(ncclComm_t comm) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  sketchcclCommGetStats(comm, &s);
  return s;
}

// ncclCommSuspend(NCCL_SUSPEND_MEM) gives back the device path's memory (the staging blocks,
// trimmed from the device's pool); calls while suspended are NCCL's; after ncclCommResume the next
// device call prepares the path again, on the caller's device, and is taken over.
int run_suspend(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  check("suspend/init", ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess);
  Buffers b(rank, true);
  auto device_allreduce = [&](const std::string& name) {
    std::fill(b.y.begin(), b.y.end(), -1.f);
    const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                         fake_client::fake_stream(0));
    check(name, r == ncclSuccess && device_work_done(comm) && is_sum(b.y, nranks),
          fmt("result %d, y[0]=%g", r, b.y[0]));
  };
  device_allreduce("suspend/taken-over-before");
  const sketchcclCommStats before = stats_of(comm);
  // The device's staging pool holds the call's block for the next call.
  check("suspend/staging-pooled",
        before.process_pinned_packet_bytes > 0 && g_model->outstanding_staging() > 0 &&
            before.suspended == 0,
        fmt("pool %llu, blocks out %zu",
            static_cast<unsigned long long>(before.process_pinned_packet_bytes),
            g_model->outstanding_staging()));
  const int prepares = g_model->counts().prepare, allocs = g_model->counts().alloc_staging;
  check("suspend/suspend", ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess);
  const sketchcclCommStats during = stats_of(comm);
  // The suspend trims the pool: no communicator leases it; every block went back to the model.
  check("suspend/released",
        during.pinned_bytes == 0 && during.device_bytes == 0 &&
            during.process_pinned_packet_bytes == 0 && during.suspended == 1 &&
            g_model->outstanding_staging() == 0,
        fmt("pinned %llu device %llu pool %llu blocks out %zu",
            static_cast<unsigned long long>(during.pinned_bytes),
            static_cast<unsigned long long>(during.device_bytes),
            static_cast<unsigned long long>(during.process_pinned_packet_bytes),
            g_model->outstanding_staging()));
  uint64_t total = 0;
  check("suspend/memstats-nccls",
        ncclCommMemStats(comm, ncclStatGpuMemTotal, &total) == ncclSuccess && total == 4096,
        fmt("total %llu", static_cast<unsigned long long>(total)));
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("suspend/call-while-suspended-is-nccls", r == ncclInvalidUsage, fmt("result %d", r));
  check("suspend/resume", ncclCommResume(comm) == ncclSuccess);
  check("suspend/nothing-made-at-resume",
        g_model->counts().prepare == prepares && g_model->counts().alloc_staging == allocs);
  device_allreduce("suspend/taken-over-after-resume");
  const sketchcclCommStats after = stats_of(comm);
  check("suspend/made-again-lazily",
        g_model->counts().prepare == prepares + 1 &&
            g_model->counts().alloc_staging == allocs + 1 &&
            list(g_model->staging_devices()).find(std::to_string(g_device)) == 0 &&
            after.process_pinned_packet_bytes > 0 && after.suspended == 0,
        fmt("prepares %d, staging allocations %d", g_model->counts().prepare.load(),
            g_model->counts().alloc_staging.load()));
  ncclCommDestroy(comm);
  return 0;
}

// FSDP's several communicators per process on one device: three (a communicator and two splits
// of it) whose device AllReduces run one after another on one stream lease one block of the
// device's staging pool between them, not one each.
int run_shared(int rank, int nranks, const ncclUniqueId& id) {
  constexpr int kComms = 3, kRounds = 2;
  ncclComm_t comms[kComms] = {};
  check("shared/init", ncclCommInitRank(&comms[0], nranks, id, rank) == ncclSuccess);
  for (int i = 1; i < kComms; ++i) {
    check("shared/split", ncclCommSplit(comms[0], 0, rank, &comms[i], nullptr) == ncclSuccess);
  }
  Buffers b(rank, true);
  const sketchcclCommStats s0 = stats_of(comms[0]);
  std::string bad;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kComms; ++i) {
      std::fill(b.y.begin(), b.y.end(), -1.f);
      const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum,
                                           comms[i], fake_client::fake_stream(0));
      const bool done = device_work_done(comms[i]);
      if (r != ncclSuccess || !done || !is_sum(b.y, nranks)) {
        bad += fmt(" comm %d: result %d done %d y[0]=%g;", i, r, done ? 1 : 0, b.y[0]);
      }
    }
  }
  check("shared/allreduces", bad.empty(), bad);
  const sketchcclCommStats s = stats_of(comms[0]);
  const uint64_t leases = s.process_packet_leases - s0.process_packet_leases;
  const uint64_t reuses = s.process_packet_reuses - s0.process_packet_reuses;
  check("shared/one-block",
        g_model->counts().alloc_staging == 1 && s.process_pinned_packet_bytes > 0 &&
            leases >= kComms * kRounds && reuses >= kComms * kRounds - 1,
        fmt("staging allocations %d, pool %llu, leases %llu, reuses %llu",
            g_model->counts().alloc_staging.load(),
            static_cast<unsigned long long>(s.process_pinned_packet_bytes),
            static_cast<unsigned long long>(leases), static_cast<unsigned long long>(reuses)));
  for (int i = kComms - 1; i >= 0; --i)
    ncclCommDestroy(comms[i]);
  return 0;
}

// A nonblocking communicator: nothing asks NCCL about it while it initialises (NCCL refuses,
// WARNs and keeps the refusal as its last error); its device path is on the current device.
int run_nonblocking(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  check("nonblocking_init", init == ncclSuccess || init == ncclInProgress, fmt("%d", init));
  check("nonblocking_ready", wait_ready(comm) == ncclSuccess);
  const std::string log = fake_client::read_log();
  check("no_cudevice_while_initialising", log.find("ncclCommCuDevice") == std::string::npos, log);
  const char* last = ncclGetLastError(comm);
  check("no_use_before_ready_error",
        last == nullptr || std::strstr(last, "before the previous operation") == nullptr,
        last != nullptr ? last : "");
  Buffers b(rank, true);
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("device_allreduce_returns", r == ncclSuccess || r == ncclInProgress, fmt("%d", r));
  check("device_allreduce_done", device_work_done(comm));
  check("device_allreduce_is_the_sum", is_sum(b.y, nranks), fmt("y[0]=%g", b.y[0]));
  const std::string want = std::getenv("MODEL_DEVICE");
  check("prepared_on_the_callers_device", list(g_model->prepare_devices()) == want,
        "prepared on " + list(g_model->prepare_devices()) + ", current device " + want);
  ncclCommDestroy(comm);
  return 0;
}

// The device path cannot be set up ($MODEL_FAIL: prepare fails, no pinned staging memory, or
// the first stream operation cannot be enqueued, before the call's input was staged): in front of
// NCCL every device call is forwarded (the fake copies send to recv) and succeeds, the
// communicator has not failed, and a host call is still taken over; standalone every device call
// fails. The setup is tried by the first call only.
int run_fail(int rank, int nranks, const ncclUniqueId& id, bool standalone) {
  const char* kind = std::getenv("MODEL_FAIL");
  const std::string failing = kind != nullptr ? kind : "";
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", init == ncclSuccess, fmt("%d", init));
  constexpr int kCalls = 3;
  const size_t before = standalone ? 0 : fake_client::log_size();
  for (int k = 0; k < kCalls; ++k) {
    Buffers b(rank, true);
    const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                         fake_client::fake_stream(0));
    if (standalone && failing == "copy" && k > 0) {
      // A failed enqueue is kept by the interposer only in front of NCCL: standalone, the next
      // call is taken over again, and runs.
      check(fmt("device_call_%d_runs", k),
            r == ncclSuccess && device_work_done(comm) && is_sum(b.y, nranks),
            fmt("%d y[0]=%g", r, b.y[0]));
    } else if (standalone) {
      check(fmt("device_call_%d_fails", k), r != ncclSuccess && r != ncclInProgress, fmt("%d", r));
    } else {
      check(fmt("device_call_%d_forwarded", k), r == ncclSuccess && b.y == b.x,
            fmt("%d y[0]=%g", r, b.y[0]));
    }
  }
  if (!standalone) {
    const std::string log = fake_client::log_since(before);
    size_t n = 0;
    for (size_t pos = 0; (pos = log.find("ncclAllReduce", pos)) != std::string::npos; ++pos)
      ++n;
    check("every_device_call_reached_nccl", n == kCalls, log);
    ncclResult_t async = ncclInternalError;
    ncclCommGetAsyncError(comm, &async);
    check("communicator_not_failed", async == ncclSuccess, fmt("%d", async));
  }
  Buffers h(rank, false);
  const ncclResult_t r = ncclAllReduce(h.x.data(), h.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("host_call_taken_over", r == ncclSuccess && is_sum(h.y, nranks),
        fmt("%d y[0]=%g", r, h.y[0]));
  // In front of NCCL the first failure is kept (the later calls are forwarded untried); standalone
  // a call without pinned memory tries again (none is kept), one after a failed copy runs.
  const ModelDevice::Counts& n = g_model->counts();
  const int staging_tries = standalone ? kCalls : 1;
  const bool tried =
      failing == "prepare"   ? n.alloc_staging == 0 && n.stream_ops() == 0
      : failing == "staging" ? n.alloc_staging == staging_tries && n.stream_ops() == 0
      : standalone           ? n.copy_async == 1 + 2 * (kCalls - 1) && n.alloc_staging >= 1
                             : n.alloc_staging == 1 && n.copy_async == 1 && n.stream_ops() == 1;
  check("setup_attempted_once", list(g_model->prepare_devices()) == "0" && tried,
        "prepared on " + list(g_model->prepare_devices()) +
            fmt(", staging allocations %d, copies %d, flags %d/%d", n.alloc_staging.load(),
                n.copy_async.load(), n.write_flag.load(), n.wait_flag.load()));
  check_no_proxy_calls("no_device_call_on_the_proxy", comm);
  ncclCommDestroy(comm);
  return 0;
}

// ncclReduceScatter of device buffers on 2 nodes x 2 ranks. hierrs (ranks 0,1 | 2,3: each
// node's chunks together): N = 2 ncclReduceScatters in one real group on the node communicator,
// node n's over input chunks [n·L, n·L + L) into chunk n of a scratch the model gave on the
// caller's stream, then the exact rail ReduceScatter (staged on the stream) into recvbuff, and the
// scratch back on the stream after the rail's staging copy; apart, in place with avg, and inside a
// user group. The fake's ReduceScatter copies the first chunk of its input, so scratch chunk n
// holds this rank's chunk n·L, and the rail leaves rank (node m, local l) the sum over the nodes n'
// of rank n'·L + l's chunk m·L. hierrsflat (ranks 0,2 | 1,3): the flat ring, no NCCL call.
// hierrsfail
// ($MODEL_FAIL=alloc: the scratch; copy: the rail's staging copy): an alloc failure forwards the
// call; a copy failure comes after phase 1 was enqueued, and the call fails; both forward the
// later calls.
int run_hier_rs(int rank, int nranks, const ncclUniqueId& id, const std::string& mode) {
  constexpr int L = 2, N = 2;
  const bool flat = mode == "hierrsflat", fail = mode == "hierrsfail";
  const int node = flat ? rank % N : rank / L, local = flat ? rank / N : rank % L;
  const char* fail_kind = std::getenv("MODEL_FAIL");
  const std::string failing = fail_kind != nullptr ? fail_kind : "";
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", init == ncclSuccess, fmt("%d", init));
  void* cp = static_cast<void*>(comm);
  constexpr size_t R = 4099;  // recvcount: odd
  auto value = [](int r, size_t chunk, size_t i) {
    return static_cast<float>(r + 1 + 10 * static_cast<int>(chunk) + static_cast<int>(i % 3));
  };
  std::string node_comm;
  for (int variant = 0; variant < (fail ? 2 : 3); ++variant) {
    const bool inplace = variant == 1 && !fail, grouped = variant == 2;
    const ncclRedOp_t op = inplace ? ncclAvg : ncclSum;
    const std::string name = mode +
                             (inplace   ? "/in-place-avg"
                              : grouped ? "/grouped"
                                        : "/apart") +
                             (fail ? "-" + std::to_string(variant) : "");
    std::vector<float> x(R * static_cast<size_t>(nranks)), y(R, -1.f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = value(rank, i / R, i % R);
    g_model->mark_device(x.data(), x.size() * sizeof(float));
    g_model->mark_device(y.data(), y.size() * sizeof(float));
    float* out = inplace ? x.data() + static_cast<size_t>(rank) * R : y.data();
    const std::vector<float> input = x;
    cudaStream_t stream = fake_client::fake_stream(static_cast<uintptr_t>(0x80 + variant));
    const size_t at = fake_client::log_size();
    const int allocs_before = g_model->counts().alloc_on_stream;
    if (failing == "copy" && variant == 0) g_model->fail_copy_in(1);  // the rail's staging copy
    ncclResult_t g1 = ncclSuccess, g2 = ncclSuccess;
    if (grouped) g1 = ncclGroupStart();
    const ncclResult_t r = ncclReduceScatter(x.data(), out, R, ncclFloat32, op, comm, stream);
    const std::string in_group = fake_client::log_since(at);
    if (grouped) g2 = ncclGroupEnd();
    const bool returned = r == ncclSuccess && g1 == ncclSuccess && g2 == ncclSuccess;
    const bool done = device_work_done(comm, stream);
    const std::string got = fake_client::log_since(at);
    auto expected = [&](size_t i) {
      if (flat) {
        float sum = 0;
        for (int p = 0; p < nranks; ++p)
          sum += value(p, static_cast<size_t>(rank), i);
        return inplace ? sum / static_cast<float>(nranks) : sum;
      }
      float sum = 0;
      for (int n = 0; n < N; ++n)
        sum += value(n * L + local, static_cast<size_t>(node * L), i);
      return inplace ? sum / N : sum;
    };
    bool exact = true;
    for (size_t i = 0; i < R && exact; ++i)
      exact = out[i] == expected(i);
    // The phase-1 lines: the real group, then node n's ReduceScatter into scratch chunk n.
    const uint8_t* scratch = g_model->last_scratch().first;
    std::string phase1 = "ncclGroupStart\n";
    for (int n = 0; n < N; ++n) {
      phase1 += fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=",
                    static_cast<void*>(x.data() + static_cast<size_t>(n * L) * R),
                    static_cast<const void*>(scratch + static_cast<size_t>(n) * R * 4), R,
                    static_cast<int>(op));
      const size_t c0 = got.find(phase1);
      if (n == 0 && c0 != std::string::npos && node_comm.empty()) {
        const size_t from = c0 + phase1.size();
        node_comm = got.substr(from, got.find(' ', from) - from);
      }
      phase1 += node_comm + fmt(" stream=%p\n", static_cast<void*>(stream));
    }
    phase1 += "ncclGroupEnd\n";
    const size_t p1 = got.find(phase1);
    auto count_of = [&got](const std::string& what) {
      size_t k = 0;
      for (size_t pos = 0; (pos = got.find(what, pos)) != std::string::npos; pos += what.size())
        ++k;
      return k;
    };
    const std::string forwarded =
        fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=%p stream=%p\n",
            static_cast<void*>(x.data()), static_cast<void*>(out), R, static_cast<int>(op), cp,
            static_cast<void*>(stream));
    if (flat) {
      check(name,
            returned && done && exact && got.find("ncclReduceScatter") == std::string::npos &&
                g_model->counts().alloc_on_stream == allocs_before,
            fmt("r=%d out[0]=%g want %g; log: ", r, out[0], expected(0)) + got);
    } else if (!fail) {
      const bool streams = !g_model->scratch_alloc_streams().empty() &&
                           g_model->scratch_alloc_streams().back() == stream &&
                           !g_model->scratch_free_streams().empty() &&
                           g_model->scratch_free_streams().back() == stream;
      check(name + "/phase1",
            returned && p1 != std::string::npos && !node_comm.empty() &&
                node_comm != fmt("%p", cp) &&
                count_of("ncclReduceScatter") == static_cast<size_t>(N) &&
                got.find("ncclAllGather") == std::string::npos &&
                got.find("ncclAllReduce") == std::string::npos &&
                g_model->last_scratch().second == static_cast<size_t>(N) * R * 4 &&
                g_model->counts().alloc_on_stream == allocs_before + 1 && streams &&
                (!grouped || (in_group.find("ncclReduceScatter") == std::string::npos &&
                              got.find("ncclGroupEnd\n") < p1)),
            fmt("r=%d g=%d,%d; log: ", r, g1, g2) + got);
      check(name + "/exact-sum", done && exact,
            fmt("out[0]=%g want %g, out[R-1]=%g want %g", out[0], expected(0), out[R - 1],
                expected(R - 1)));
      check(name + "/scratch-back-after-the-rail", g_model->live_scratch() == 0);
    } else if (failing == "alloc") {
      // Forwarded: the fake copies sendbuff's first chunk into recvbuff.
      const bool copied = std::equal(out, out + R, input.begin());
      check(name + "/forwarded",
            r == ncclSuccess && copied && got.find(forwarded) != std::string::npos &&
                count_of("ncclReduceScatter") == 1 &&
                g_model->counts().alloc_on_stream == allocs_before + (variant == 0 ? 1 : 0),
            fmt("r=%d; log: ", r) + got);
    } else {
      if (variant == 0) {
        check(name + "/phase1-enqueued-then-the-call-fails",
              r != ncclSuccess && r != ncclInProgress && p1 != std::string::npos &&
                  count_of("ncclReduceScatter") == static_cast<size_t>(N),
              fmt("r=%d; log: ", r) + got);
        check(name + "/scratch-back-after-the-failure", g_model->live_scratch() == 0);
      } else {
        const bool copied = std::equal(out, out + R, input.begin());
        check(name + "/later-call-forwarded",
              r == ncclSuccess && copied && got.find(forwarded) != std::string::npos &&
                  count_of("ncclReduceScatter") == 1 &&
                  g_model->counts().alloc_on_stream == allocs_before,
              fmt("r=%d; log: ", r) + got);
      }
    }
    g_model->unmark(x.data());
    g_model->unmark(y.data());
  }
  if (fail) {
    ncclResult_t async = ncclInternalError;
    ncclCommGetAsyncError(comm, &async);
    check("communicator_not_failed", async == ncclSuccess, fmt("%d", async));
  }
  ncclCommDestroy(comm);
  return 0;
}

// ncclAllGather of device buffers with SKETCHCCL_ALLGATHER_CODEC (set by the test, or not: mode
// gatherunset). gather (2 ranks, one per node) and hiergatherflat (2 nodes x 2 ranks, ranks
// 0,2 | 1,3): SketchCCL's staged compressed gather (node-aware on the second: exact over its own
// transport inside the node), no NCCL call; apart, in place and inside a user group; every rank
// prints a hash of its whole output, which the test compares across ranks. hiergather (ranks
// 0,1 | 2,3): the rail's compressed gather staged into a scratch the model gave on the stream,
// then N ncclAllGathers in one real group on the node communicator, node n's of scratch shard n
// into output block n; the fake's AllGather copies at once (before the stream wrote the scratch),
// so the rail's decoded shards are checked in the scratch as its stream gave it back, and their
// hash compared across the rail's ranks.
// gatherunset: forwarded to the fake unchanged. hiergatherfail ($MODEL_FAIL=alloc, ranks 0,1 |
// 2,3): no scratch, the call forwarded with one WARN, the later one too.
int run_gather(int rank, int nranks, const ncclUniqueId& id, const std::string& mode) {
  constexpr int L = 2;
  const bool hier = mode == "hiergather", unset = mode == "gatherunset";
  const bool fail = mode == "hiergatherfail";  // $MODEL_FAIL=alloc: no scratch
  const int N = nranks / L, local = rank % L;
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", init == ncclSuccess, fmt("%d", init));
  void* cp = static_cast<void*>(comm);
  constexpr size_t R = 4099;  // sendcount: odd
  auto value = [](int r, size_t i) {
    return std::sin(0.001f * static_cast<float>(i) + static_cast<float>(r)) *
           static_cast<float>(1 + r);
  };
  const int variants = unset ? 1 : fail ? 2 : 3;
  for (int variant = 0; variant < variants; ++variant) {
    const bool inplace = variant == 1, grouped = variant == 2;
    const std::string name = mode + (inplace ? "/in-place" : grouped ? "/grouped" : "/apart");
    std::vector<float> x(R), y(R * static_cast<size_t>(nranks), -1.f);
    float* send = inplace ? y.data() + static_cast<size_t>(rank) * R : x.data();
    for (size_t i = 0; i < R; ++i)
      send[i] = value(rank, i);
    g_model->mark_device(x.data(), x.size() * sizeof(float));
    g_model->mark_device(y.data(), y.size() * sizeof(float));
    cudaStream_t stream = fake_client::fake_stream(static_cast<uintptr_t>(0x90 + variant));
    const size_t at = fake_client::log_size();
    sketchcclCommStats before{};
    before.size = sizeof before;
    sketchcclCommGetStats(comm, &before);
    const int allocs_before = g_model->counts().alloc_on_stream;
    ncclResult_t g1 = ncclSuccess, g2 = ncclSuccess;
    if (grouped) g1 = ncclGroupStart();
    const ncclResult_t r = ncclAllGather(send, y.data(), R, ncclFloat32, comm, stream);
    if (grouped) g2 = ncclGroupEnd();
    const bool returned = r == ncclSuccess && g1 == ncclSuccess && g2 == ncclSuccess;
    const bool done = device_work_done(comm, stream);
    const std::string got = fake_client::log_since(at);
    sketchcclCommStats after{};
    after.size = sizeof after;
    sketchcclCommGetStats(comm, &after);
    auto count_of = [&got](const std::string& what) {
      size_t k = 0;
      for (size_t pos = 0; (pos = got.find(what, pos)) != std::string::npos; pos += what.size())
        ++k;
      return k;
    };
    if (unset) {
      const std::string forwarded =
          fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%p stream=%p\n",
              static_cast<void*>(send), static_cast<void*>(y.data()), R, cp,
              static_cast<void*>(stream));
      check(name + "/forwarded",
            returned && got.find(forwarded) != std::string::npos &&
                count_of("ncclAllGather") == 1 && after.allgather_calls == 0,
            fmt("r=%d; log: ", r) + got);
      g_model->unmark(x.data());
      g_model->unmark(y.data());
      continue;
    }
    if (fail) {
      // No scratch: forwarded unchanged (the fake copies sendbuff into recvbuff's first shard),
      // and so is the later call, which asks for no scratch (the device path is NCCL's now).
      const std::string forwarded =
          fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%p stream=%p\n",
              static_cast<void*>(send), static_cast<void*>(y.data()), R, cp,
              static_cast<void*>(stream));
      check(name + "/forwarded-without-scratch",
            returned && got.find(forwarded) != std::string::npos &&
                count_of("ncclAllGather") == 1 && after.allgather_calls == 0 &&
                g_model->counts().alloc_on_stream == allocs_before + (variant == 0 ? 1 : 0) &&
                std::equal(send, send + R, y.data()),
            fmt("r=%d; log: ", r) + got);
      g_model->unmark(x.data());
      g_model->unmark(y.data());
      continue;
    }
    // The shards this rank checks: every rank's (owner q at q), or hiergather's N of its rail.
    std::vector<int> owners;
    for (int q = 0; q < nranks; ++q) {
      if (!hier || q % L == local) owners.push_back(q);
    }
    std::vector<uint8_t> freed = g_model->last_freed_scratch();
    if (hier && freed.size() != static_cast<size_t>(N) * R * 4) freed.assign(N * R * 4, 0);
    double err = 0, ref = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int q : owners) {
      for (size_t i = 0; i < R; ++i) {
        // hiergather: the rail's shards as the scratch held them for NCCL (node n's at n; the
        // fake's AllGather copied the scratch before the stream had written it).
        float got_v;
        if (hier) {
          std::memcpy(&got_v, freed.data() + (static_cast<size_t>(q / L) * R + i) * 4, 4);
        } else {
          got_v = y[static_cast<size_t>(q) * R + i];
        }
        const float want = value(q, i);
        err += (got_v - want) * (got_v - want);
        ref += want * want;
        uint32_t bits;
        std::memcpy(&bits, &got_v, sizeof bits);
        hash = (hash ^ bits) * 1099511628211ull;
      }
    }
    const double nmse = err / ref;
    const bool counted =
        after.allgather_calls == before.allgather_calls + 1 &&
        after.allgather_failed == before.allgather_failed &&
        after.allgather_bytes_in == before.allgather_bytes_in + R * 4 &&
        after.allgather_inter_node_bytes_sent > before.allgather_inter_node_bytes_sent;
    // hiergather in place: the fake's AllGather wrote the node's first shards at once, the
    // caller's input of local rank 0 among them, before the stream copied it in (a GPU runs the
    // copy first, in stream order): its data is not checked.
    const bool data = !(hier && inplace);
    check(name + "/compressed", returned && done && (!data || (nmse < 1e-3 && nmse > 0)) && counted,
          fmt("r=%d done=%d nmse=%g calls %llu -> %llu", r, done, nmse,
              static_cast<unsigned long long>(before.allgather_calls),
              static_cast<unsigned long long>(after.allgather_calls)));
    if (data)
      std::printf("GATHERHASH %s %d %016llx\n", name.c_str(), hier ? local : 0,
                  static_cast<unsigned long long>(hash));
    if (!hier) {
      check(name + "/no-nccl-call",
            got.find("ncclAllGather") == std::string::npos &&
                g_model->counts().alloc_on_stream == allocs_before,
            "log: " + got);
    } else {
      // The phase-2 lines: the real group, node n's AllGather from scratch shard n into block n.
      const uint8_t* scratch = g_model->last_scratch().first;
      const size_t p0 = got.find("ncclGroupStart\n");
      bool lines = p0 != std::string::npos;
      for (int n = 0; n < N && lines; ++n) {
        const std::string line =
            fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=",
                static_cast<const void*>(scratch + static_cast<size_t>(n) * R * 4),
                static_cast<void*>(y.data() + static_cast<size_t>(n * L) * R), R);
        const size_t pos = got.find(line);
        lines = pos != std::string::npos && pos > p0;
        if (lines) {  // on the node communicator, not the caller's
          const size_t from = pos + line.size();
          lines = got.substr(from, got.find(' ', from) - from) != fmt("%p", cp);
        }
      }
      check(name + "/nccl-node-phase",
            returned && lines && count_of("ncclAllGather") == static_cast<size_t>(N) &&
                got.find("ncclGroupEnd\n", p0) != std::string::npos &&
                g_model->last_scratch().second == static_cast<size_t>(N) * R * 4 &&
                g_model->counts().alloc_on_stream == allocs_before + 1 &&
                g_model->live_scratch() == 0,
            fmt("r=%d g=%d,%d; log: ", r, g1, g2) + got);
    }
    g_model->unmark(x.data());
    g_model->unmark(y.data());
  }
  check_no_proxy_calls(mode + "/no_device_call_on_the_proxy", comm);
  ncclCommDestroy(comm);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(
        stderr,
        "usage: %s RANK NRANKS IDFILE "
        "group|nonblocking|fail|hierrs|hierrsflat|hierrsfail|gather|gatherunset|hiergather|"
        "hiergatherflat|hiergatherfail|suspend|shared\n",
        argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  const std::string mode = argv[4];
  const char* dev = std::getenv("MODEL_DEVICE");
  const char* fail = std::getenv("MODEL_FAIL");
  const char* log = std::getenv("FAKE_NCCL_LOG");
  const char* lib = std::getenv("SKETCHCCL_NCCL_LIB");
  if (dev == nullptr || log == nullptr || lib == nullptr) {
    std::fprintf(stderr, "MODEL_DEVICE, FAKE_NCCL_LOG and SKETCHCCL_NCCL_LIB must be set\n");
    return 2;
  }
  fake_client::g_log = log;
  testutil::ModelOptions options;
  options.device = g_device = std::atoi(dev);
  options.queues = 1;  // the strictest: every stream of the device on one hardware queue
  ModelDevice model(options);
  const std::string failing = fail != nullptr ? fail : "";
  model.fail_prepare(failing == "prepare");
  model.fail_alloc_staging(failing == "staging");
  model.fail_alloc_on_stream(failing == "alloc");
  if (failing == "copy" && mode == "fail") model.fail_copy_in(1);
  g_model = &model;
  set_device_runtime_for_test(&model);
  ncclUniqueId id;
  fake_client::exchange_id(rank, argv[3], false, &id);
  const bool standalone = std::strcmp(lib, "none") == 0;
  if (mode == "group") {
    run_group(rank, nranks, id);
  } else if (mode == "nonblocking") {
    run_nonblocking(rank, nranks, id);
  } else if (mode == "fail") {
    run_fail(rank, nranks, id, standalone);
  } else if (mode == "suspend") {
    run_suspend(rank, nranks, id);
  } else if (mode == "shared") {
    run_shared(rank, nranks, id);
  } else if (mode.rfind("hierrs", 0) == 0) {
    run_hier_rs(rank, nranks, id, mode);
  } else if (mode.find("gather") != std::string::npos) {
    run_gather(rank, nranks, id, mode);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("DONE fails=%d\n", fake_client::g_fails);
  // The process's SketchCCL state is torn down at exit, after the model is gone otherwise.
  std::fflush(stdout);
  std::_Exit(fake_client::g_fails == 0 ? 0 : 1);
}
