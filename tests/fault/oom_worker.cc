// One rank of the out-of-memory test (oom_test.cc): a standalone in-place AllReduce of COUNT
// floats after which one rank limits its own address space, so that SketchCCL's allocations for
// the call fail.
//
//   oom_worker allreduce|init RANK NRANKS ID_HEX LIMITED_RANK HEADROOM_MIB COUNT
//
// `init`: the limit comes before ncclCommInitRank, which fails on that rank; the others must
// hear of it from the root at once.
// Prints "RESULT rank=<r> rc=<ncclResult_t> seconds=<time in the call> at=<when it returned,
// seconds since the epoch> error=<last error>".
// The limited rank then stays alive until every other rank has returned (each leaves a file
// `done.<rank>` in $OOM_DONE_DIR), so that their failure comes from SketchCCL (its communicator
// closes), not from the process exiting; it prints "STAYED peers_done=<n> seconds=<s>".
#include <nccl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "tests/api/rank_report.h"

namespace {

// The longest the limited rank waits for its peers: below their 60 s timeout, so a peer that
// fails only at that timeout is seen as not done.
constexpr double kStayAtMostSeconds = 40;

// The process's current address-space size (VmSize), in bytes.
size_t address_space_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmSize:") {
      size_t kib = 0;
      in >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

// Limits this process's address space to what it uses now plus `headroom` bytes.
bool limit_address_space(size_t headroom) {
  const size_t vm = address_space_bytes();
  rlimit lim{vm + headroom, vm + headroom};
  return vm != 0 && setrlimit(RLIMIT_AS, &lim) == 0;
}

void print_result(int rank, ncclResult_t rc, double seconds, const char* error) {
  const double at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::printf("RESULT rank=%d rc=%d seconds=%.2f at=%.3f error=%s\n", rank, static_cast<int>(rc),
              seconds, at, rc == ncclSuccess ? "" : error);
  std::fflush(stdout);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The files the other ranks leave in `dir` once their call has returned.
int peers_done(const std::string& dir, int nranks, int self) {
  int n = 0;
  for (int r = 0; r < nranks; ++r) {
    if (r != self && access((dir + "/done." + std::to_string(r)).c_str(), F_OK) == 0) ++n;
  }
  return n;
}

// Every rank but the limited one says it has returned; the limited one waits for them all.
void meet_after_the_call(int rank, int nranks, int limited) {
  const char* dir = std::getenv("OOM_DONE_DIR");
  if (dir == nullptr || *dir == '\0') return;
  if (rank != limited) {
    std::ofstream(std::string(dir) + "/done." + std::to_string(rank)) << "done\n";
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0;
  while ((done = peers_done(dir, nranks, rank)) < nranks - 1 && since(t0) < kStayAtMostSeconds)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::printf("STAYED peers_done=%d seconds=%.2f\n", done, since(t0));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  sketchccl::testing::WorkerArgs wa;
  if (!sketchccl::testing::parse_worker_args(argc, argv, &wa) || argc < 8) return 2;
  const int limited = std::atoi(argv[5]);
  const size_t headroom = static_cast<size_t>(std::atol(argv[6])) << 20;
  const size_t count = static_cast<size_t>(std::atol(argv[7]));
  ncclComm_t comm = nullptr;
  if (wa.scenario == "init") {
    int version = 0;
    ncclGetVersion(&version);
    if (wa.rank == limited && !limit_address_space(headroom)) return 5;
    const auto t0 = std::chrono::steady_clock::now();
    ncclResult_t rc = ncclCommInitRank(&comm, wa.nranks, wa.id, wa.rank);
    print_result(wa.rank, rc, since(t0), ncclGetLastError(nullptr));
    if (rc == ncclSuccess) ncclCommAbort(comm);
    return 0;
  }
  if (ncclCommInitRank(&comm, wa.nranks, wa.id, wa.rank) != ncclSuccess) {
    std::printf("init failed: %s\n", ncclGetLastError(nullptr));
    return 3;
  }
  // Dense data, so that the sparse codec's support is the whole buffer.
  std::unique_ptr<float[]> buf(new float[count]);
  for (size_t i = 0; i < count; ++i)
    buf[i] = static_cast<float>((i + static_cast<size_t>(wa.rank)) % 7 + 1);
  // A first small call: the ring is connected before the limit.
  float warm[1024];
  for (float& v : warm)
    v = 1.0f;
  if (ncclAllReduce(warm, warm, 1024, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess ||
      warm[0] != static_cast<float>(wa.nranks)) {
    std::printf("warm-up AllReduce failed: %s\n", ncclGetLastError(comm));
    return 4;
  }
  if (wa.rank == limited && !limit_address_space(headroom)) {
    std::printf("cannot limit the address space\n");
    return 5;
  }
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t rc = ncclAllReduce(buf.get(), buf.get(), count, ncclFloat32, ncclSum, comm, nullptr);
  print_result(wa.rank, rc, since(t0), ncclGetLastError(comm));
  meet_after_the_call(wa.rank, wa.nranks, limited);
  ncclCommAbort(comm);
  return 0;
}
