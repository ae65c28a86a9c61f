// The communicator lifecycle under LD_PRELOAD=libsketchccl.so in front of the fake libnccl.so.2:
// splits agreed across ranks whatever their timing, nonblocking splits, abort, revoke and
// shrink-abort, and fork. Run by lifecycle_test in several processes.
//
//   lifecycle_client RANK NRANKS ID_FILE MODE    MODE: latesplit | splitfail | nbsplit | abort
//                                                 | revoke | fork | scalable
//
// Prints "CHECK <name> OK|FAIL <detail>" lines; exits 1 on any FAIL.
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fake_nccl/client_util.h"

namespace {

using fake_client::check;
using fake_client::fake_stream;
using fake_client::fmt;
using fake_client::log_since;
using fake_client::log_size;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// A 1 MiB float sum: taken over (no fake call, the sum within q8's error) or forwarded (the
// fake's line, and the fake copies).
void allreduce(const std::string& name, ncclComm_t comm, int rank, int nranks, bool take_over) {
  std::vector<float> send(262144, static_cast<float>(rank + 1)), recv(send.size(), 0.0f);
  size_t at = log_size();
  ncclResult_t r = ncclAllReduce(send.data(), recv.data(), send.size(), ncclFloat32, ncclSum, comm,
                                 fake_stream(0x70));
  const std::string got = log_since(at);
  const bool arrived =
      got.find(fmt("ncclAllReduce send=%p", static_cast<void*>(send.data()))) != std::string::npos;
  const float want = static_cast<float>(nranks * (nranks + 1)) / 2.0f;
  const bool value_ok = take_over ? std::abs(recv[1000] - want) <= 0.05f * want : recv == send;
  check(name, r == ncclSuccess && arrived == !take_over && value_ok,
        std::string(take_over ? "expected taken over" : "expected forwarded") + ", result " +
            std::to_string(r) + (arrived ? ", arrived" : ", not arrived") +
            (value_ok ? "" : ", wrong values"));
}

void async_ok(const std::string& name, ncclComm_t comm) {
  ncclResult_t async = ncclInternalError;
  ncclResult_t r = ncclCommGetAsyncError(comm, &async);
  check(name, r == ncclSuccess && async == ncclSuccess,
        "result " + std::to_string(r) + ", async " + std::to_string(async));
}

ncclComm_t init(int rank, int nranks, const std::string& id_path) {
  ncclUniqueId id;
  fake_client::exchange_id(rank, id_path, false, &id);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", r == ncclSuccess && comm != nullptr, "result " + std::to_string(r));
  return comm;
}

// One rank comes late to init (and, before the fix, its split ran the membership exchange alone
// while the others decided on their own timing to skip it; the parent then failed everywhere).
void late_split(int rank, int nranks, const std::string& id_path) {
  const int late = nranks - 1;
  if (rank == late) sleep_s(2.0);
  ncclComm_t parent = init(rank, nranks, id_path);
  if (rank == late) sleep_s(0.5);  // its own join is done by its split
  ncclComm_t child = nullptr;
  ncclResult_t r = ncclCommSplit(parent, 0, rank, &child, nullptr);
  check("latesplit/split", r == ncclSuccess && child != nullptr, "result " + std::to_string(r));
  allreduce("latesplit/parent-taken-over", parent, rank, nranks, true);
  allreduce("latesplit/child-taken-over", child, rank, nranks, true);
  async_ok("latesplit/parent-not-failed", parent);
  async_ok("latesplit/child-not-failed", child);
  // Inside a group: the exchange is waited for at ncclGroupEnd, after the real group.
  ncclComm_t grouped = nullptr;
  ncclResult_t r1 = ncclGroupStart();
  ncclResult_t r2 = ncclCommSplit(parent, 0, nranks - rank, &grouped, nullptr);
  ncclResult_t r3 = ncclGroupEnd();
  check("latesplit/grouped-split",
        r1 == ncclSuccess && r2 == ncclSuccess && r3 == ncclSuccess && grouped != nullptr);
  allreduce("latesplit/grouped-child-taken-over", grouped, rank, nranks, true);
  check("latesplit/destroy", ncclCommDestroy(grouped) == ncclSuccess &&
                                 ncclCommDestroy(child) == ncclSuccess &&
                                 ncclCommDestroy(parent) == ncclSuccess);
}

// Rank 1 never splits: rank 0's membership exchange times out (SKETCHCCL_TIMEOUT=2 here). Its
// parent is not failed: SketchCCL steps aside and the parent's calls go to the real NCCL.
void failed_split(int rank, int nranks, const std::string& id_path) {
  ncclComm_t parent = init(rank, nranks, id_path);
  allreduce("splitfail/parent-taken-over", parent, rank, nranks, true);
  if (rank == 0) {
    ncclComm_t child = nullptr;
    check("splitfail/split", ncclCommSplit(parent, 0, rank, &child, nullptr) == ncclSuccess);
    async_ok("splitfail/parent-not-failed", parent);
    allreduce("splitfail/parent-forwarded-after", parent, rank, nranks, false);
    allreduce("splitfail/child-forwarded", child, rank, nranks, false);
    check("splitfail/destroy-child", ncclCommDestroy(child) == ncclSuccess);
  } else {
    sleep_s(6.0);  // past rank 0's exchange
    async_ok("splitfail/parent-not-failed", parent);
  }
  check("splitfail/destroy", ncclCommDestroy(parent) == ncclSuccess);
}

// Polls a nonblocking communicator until it leaves ncclInProgress (PyTorch's waitReady).
ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 5000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) sleep_s(0.002);
  }
  return async;
}

ncclComm_t init_nonblocking(int rank, int nranks, const std::string& id_path) {
  ncclUniqueId id;
  fake_client::exchange_id(rank, id_path, false, &id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  check("init-nonblocking",
        r == ncclInProgress && comm != nullptr && wait_ready(comm) == ncclSuccess,
        "result " + std::to_string(r));
  return comm;
}

// The child of a nonblocking split into a slot that the caller frees once NCCL has written it
// (as XLA's local split_comm goes with its stack frame).
ncclComm_t split_into_freed_slot(ncclComm_t parent, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto* slot = new ncclComm_t(nullptr);
  if (ncclCommSplit(parent, 0, rank, slot, &config) != ncclSuccess) return nullptr;
  (void)wait_ready(parent);
  for (int i = 0; i < 500 && __atomic_load_n(slot, __ATOMIC_ACQUIRE) == nullptr; ++i)
    sleep_s(0.01);
  ncclComm_t child = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  *slot = nullptr;  // reused for something else, then freed
  delete slot;
  return child;
}

// A nonblocking split of a nonblocking parent (on every rank): returns at once, without waiting
// for the other ranks, with *newcomm NULL; NCCL writes it later (the fake after 100 ms), and the
// child, adopted on its first call, is taken over on every rank. Again into a slot the caller
// frees once the split is done: the child is still adopted (SketchCCL kept no pointer to it).
void nonblocking_split(int rank, int nranks, const std::string& id_path) {
  ncclComm_t parent = init_nonblocking(rank, nranks, id_path);
  allreduce("nbsplit/parent-taken-over", parent, rank, nranks, true);
  if (rank == 1) sleep_s(1.5);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t child = nullptr;
  const double t0 = now_s();
  ncclResult_t r = ncclCommSplit(parent, 0, rank, &child, &config);
  const double took = now_s() - t0;
  check("nbsplit/returns-at-once", r == ncclSuccess && took < 1.0,
        fmt("result %d, %.2f s", static_cast<int>(r), took));
  ncclComm_t ready = nullptr;
  for (int i = 0; i < 500 && ready == nullptr; ++i) {
    ready = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
    if (ready == nullptr) sleep_s(0.01);
  }
  check("nbsplit/newcomm-written", ready != nullptr);
  (void)wait_ready(parent);
  allreduce("nbsplit/child-taken-over", ready, rank, nranks, true);
  async_ok("nbsplit/child-not-failed", ready);
  allreduce("nbsplit/parent-still-taken-over", parent, rank, nranks, true);
  ncclComm_t stacked = split_into_freed_slot(parent, rank);
  check("nbsplit/freed-slot-written", stacked != nullptr);
  allreduce("nbsplit/freed-slot-child-taken-over", stacked, rank, nranks, true);
  check("nbsplit/destroy", ncclCommDestroy(stacked) == ncclSuccess &&
                               ncclCommDestroy(ready) == ncclSuccess &&
                               ncclCommDestroy(parent) == ncclSuccess);
}

// ncclCommAbort: the real abort runs before SketchCCL's side is joined. SKETCHCCL_STATS_FILE is
// the fake's log, so the statistics line SketchCCL writes after the join lands after the real
// ncclCommAbort's line.
void abort_order(int rank, int nranks, const std::string& id_path) {
  ncclComm_t comm = init(rank, nranks, id_path);
  allreduce("abort/taken-over", comm, rank, nranks, true);
  size_t at = log_size();
  const double t0 = now_s();
  ncclResult_t r = ncclCommAbort(comm);
  const double took = now_s() - t0;
  const std::string got = log_since(at);
  const size_t real = got.find(fmt("ncclCommAbort comm=%p", static_cast<void*>(comm)));
  const size_t stats = got.find("{");
  check("abort/real-abort-first",
        r == ncclSuccess && real != std::string::npos && stats != std::string::npos &&
            real < stats && took < 5.0,
        fmt("%.2f s, log: ", took) + got);
}

// ncclCommRevoke and ncclCommShrink(NCCL_SHRINK_ABORT) stop SketchCCL's side: later calls are
// the real NCCL's, and destroy has nothing of SketchCCL's to wait for.
void revoke_and_shrink(int rank, int nranks, const std::string& id_path) {
  ncclComm_t parent = init(rank, nranks, id_path);
  ncclComm_t child = nullptr;
  check("revoke/split", ncclCommSplit(parent, 0, rank, &child, nullptr) == ncclSuccess);
  allreduce("revoke/child-taken-over", child, rank, nranks, true);
  size_t at = log_size();
  ncclResult_t r = ncclCommRevoke(child, 0);
  check("revoke/forwarded",
        r == ncclSuccess && log_since(at).find(fmt("ncclCommRevoke comm=%p flags=0\n",
                                                   static_cast<void*>(child))) != std::string::npos,
        log_since(at));
  {
    // Forwarded, and the revoked communicator's call fails as NCCL's (the fake's) does.
    std::vector<float> buf(262144, 1.0f);
    at = log_size();
    r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, child,
                      fake_stream(0x70));
    check("revoke/child-forwarded-after",
          r == ncclInvalidUsage && log_since(at).find("ncclAllReduce") != std::string::npos,
          "result " + std::to_string(r));
  }
  double t0 = now_s();
  check("revoke/destroy-prompt", ncclCommDestroy(child) == ncclSuccess && now_s() - t0 < 2.0);

  allreduce("shrink/parent-taken-over", parent, rank, nranks, true);
  ncclComm_t shrunk = nullptr;
  r = ncclCommShrink(parent, nullptr, 0, &shrunk, nullptr, NCCL_SHRINK_ABORT);
  check("shrink/abort-forwarded", r == ncclSuccess && shrunk != nullptr);
  allreduce("shrink/parent-forwarded-after", parent, rank, nranks, false);
  allreduce("shrink/child-forwarded", shrunk, rank, nranks, false);
  t0 = now_s();
  check("shrink/destroy-prompt", ncclCommDestroy(shrunk) == ncclSuccess &&
                                     ncclCommDestroy(parent) == ncclSuccess && now_s() - t0 < 2.0);
}

// A forked child that calls exit() (its atexit handlers run) exits; the parent's communicator
// goes on.
void fork_exit(int rank, int nranks, const std::string& id_path) {
  ncclComm_t comm = init(rank, nranks, id_path);
  allreduce("fork/taken-over-before", comm, rank, nranks, true);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) std::exit(0);
  int status = -1;
  bool exited = false;
  for (int i = 0; i < 200 && !exited; ++i) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) sleep_s(0.05);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  check("fork/child-exit-returns", exited && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        exited ? fmt("status 0x%x", status) : "the child hung in exit() for 10 s");
  allreduce("fork/taken-over-after", comm, rank, nranks, true);
  check("fork/destroy", ncclCommDestroy(comm) == ncclSuccess);
}

// Threads of this process (/proc/self/task).
int thread_count() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// ncclCommInitRankScalable with one id per rank (as with one id per 128 ranks): SketchCCL joins
// over the first; the root listener rank 1 made for the second stops at once (before, it waited
// SKETCHCCL_TIMEOUT for ranks that never come, then warned).
void scalable(int rank, int nranks, const std::string& id_path) {
  ncclUniqueId ids[2];
  fake_client::exchange_id(rank, id_path, false, &ids[0]);
  if (rank == 1) {
    if (ncclGetUniqueId(&ids[1]) != ncclSuccess) std::exit(3);
    std::ofstream(id_path + ".1.tmp", std::ios::binary).write(ids[1].internal, sizeof ids[1]);
    std::rename((id_path + ".1.tmp").c_str(), (id_path + ".1").c_str());
  } else {
    fake_client::exchange_id(1, id_path + ".1", false, &ids[1]);  // reads it
  }
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankScalable(&comm, nranks, rank, 2, ids, nullptr);
  check("scalable/init", r == ncclSuccess && comm != nullptr, "result " + std::to_string(r));
  allreduce("scalable/taken-over", comm, rank, nranks, true);
  int threads = 0;
  for (int i = 0; i < 100; ++i) {
    threads = thread_count();
    if (threads <= 2) break;
    sleep_s(0.02);
  }
  check("scalable/no-root-left", threads == 2,
        fmt("%d threads (main and proxy expected)", threads));
  check("scalable/destroy", ncclCommDestroy(comm) == ncclSuccess);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: lifecycle_client RANK NRANKS ID_FILE MODE\n");
    return 2;
  }
  alarm(120);
  const int rank = std::atoi(argv[1]), nranks = std::atoi(argv[2]);
  const std::string id_path = argv[3], mode = argv[4];
  const char* log = std::getenv("FAKE_NCCL_LOG");
  if (log == nullptr) return 2;
  fake_client::g_log = log;
  if (mode == "latesplit") {
    late_split(rank, nranks, id_path);
  } else if (mode == "splitfail") {
    failed_split(rank, nranks, id_path);
  } else if (mode == "scalable") {
    scalable(rank, nranks, id_path);
  } else if (mode == "nbsplit") {
    nonblocking_split(rank, nranks, id_path);
  } else if (mode == "abort") {
    abort_order(rank, nranks, id_path);
  } else if (mode == "revoke") {
    revoke_and_shrink(rank, nranks, id_path);
  } else if (mode == "fork") {
    fork_exit(rank, nranks, id_path);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  return fake_client::g_fails ? 1 : 0;
}
