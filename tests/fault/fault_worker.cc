// One rank of a fault test (standalone, through nccl.h only): CALLS large AllReduces or
// ReduceScatters in a row while the driver (fault.sh) drops links, stops ranks or partitions them.
//
//   fault_worker RANK NRANKS ID_FILE OP COUNT CALLS [ABORT_AFTER_S]
//
// OP is allreduce or reducescatter; COUNT the elements each rank contributes (fp32, sum). Rank 0
// makes the id and writes it to ID_FILE; the others wait for that file. ABORT_AFTER_S > 0: a
// second thread calls ncclCommAbort that long after the second call started (a stalled call
// must then return promptly). Every call prints one line the driver reads:
//   CALL i OK HASH h SECONDS s | CALL i ERR code SECONDS s MSG ... | CALL i WRONG why
// FAULT_BAD=CALL:RANK:null|type|op in the environment: that rank passes a null buffer, an unknown
// type or an unknown op in that call (it must get ncclInvalidArgument, the others an error within
// SKETCHCCL_TIMEOUT). Then "ABORTED AT t CALL RETURNED AT t RSS_DELTA_MB m" when the abort thread
// ran, and "DONE". FAULT_GO_FILE=path: after call 1 the rank waits until that file exists, so the
// driver can put its fault in place before the next call starts (calls too short to hit). Exit 0
// when every call completed correctly, 3 when a call failed with an error (the rest are skipped), 4
// on a wrong result, 2 on bad usage.
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/rank_report.h"

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Small integers: every partial sum is exact in fp32, so `none` must match bit for bit.
float input(int rank, size_t i, int call) {
  return static_cast<float>(
      static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + static_cast<size_t>(call) * 5) %
                       17) -
      8);
}

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

bool write_id(const char* path, const ncclUniqueId& id) {
  std::string hex;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  std::string tmp = std::string(path) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fputs(hex.c_str(), f);
  std::fclose(f);
  return std::rename(tmp.c_str(), path) == 0;
}

bool read_id(const char* path, ncclUniqueId* id) {
  for (int i = 0; i < 600; ++i) {  // 60 s for rank 0 to start
    std::ifstream f(path);
    std::string hex;
    if (f >> hex && sketchccl::testing::parse_id_hex(hex.c_str(), id)) return true;
    usleep(100000);
  }
  return false;
}

// How far a result may be from the exact sum: 0 for `none`, else the lossy codec's error bound
// relative to the largest magnitude (every rank must still return the same bytes: the hash).
double tolerance() {
  const char* c = std::getenv("SKETCHCCL_CODEC");
  return (c == nullptr || std::strcmp(c, "none") == 0) ? 0.0 : 0.15;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: %s RANK NRANKS ID_FILE allreduce|reducescatter COUNT CALLS "
                 "[ABORT_AFTER_S]\n",
                 argv[0]);
    return 2;
  }
  alarm(600);
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  const char* id_file = argv[3];
  const bool reduce_scatter = std::strcmp(argv[4], "reducescatter") == 0;
  if (!reduce_scatter && std::strcmp(argv[4], "allreduce") != 0) return 2;
  size_t count = std::strtoull(argv[5], nullptr, 10);
  if (reduce_scatter) count -= count % static_cast<size_t>(nranks);
  const int calls = std::atoi(argv[6]);
  const double abort_after = argc > 7 ? std::atof(argv[7]) : 0.0;
  if (nranks < 1 || rank < 0 || rank >= nranks || count == 0 || calls < 1) return 2;

  const long rss_before = rss_kb();
  ncclUniqueId id{};
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess || !write_id(id_file, id)) {
      std::printf("INIT ERR %s\n", ncclGetLastError(nullptr));
      return 3;
    }
  } else if (!read_id(id_file, &id)) {
    std::printf("INIT ERR no id in %s\n", id_file);
    return 3;
  }
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
  if (r != ncclSuccess) {
    std::printf("INIT ERR %d %s\n", static_cast<int>(r), ncclGetLastError(nullptr));
    return 3;
  }
  std::printf("READY\n");
  std::fflush(stdout);

  const size_t out_count = reduce_scatter ? count / nranks : count;
  const size_t out_offset = reduce_scatter ? out_count * rank : 0;
  std::vector<float> in(count), out(out_count);
  std::atomic<bool> second_call_started{false};
  std::atomic<double> aborted_at{0};
  const Clock::time_point t_start = Clock::now();
  std::thread aborter;
  if (abort_after > 0) {
    aborter = std::thread([&] {
      while (!second_call_started.load())
        usleep(1000);
      usleep(static_cast<useconds_t>(abort_after * 1e6));
      aborted_at.store(since(t_start));
      ncclCommAbort(comm);
    });
  }
  int bad_call = -1, bad_rank = -1;
  char bad_kind[16] = "";
  if (const char* b = std::getenv("FAULT_BAD")) {
    if (std::sscanf(b, "%d:%d:%15s", &bad_call, &bad_rank, bad_kind) != 3) return 2;
  }
  const double tol = tolerance();
  double failed_at = 0;
  int rc = 0;
  for (int c = 0; c < calls && rc == 0; ++c) {
    for (size_t i = 0; i < count; ++i)
      in[i] = input(rank, i, c);
    if (c == 1) second_call_started.store(true);
    if (const char* go = std::getenv("FAULT_GO_FILE"); go && c == 2)
      while (access(go, F_OK) != 0)
        usleep(1000);
    const bool bad = c == bad_call && rank == bad_rank;
    const float* send = bad && std::strcmp(bad_kind, "null") == 0 ? nullptr : in.data();
    const auto type =
        bad && std::strcmp(bad_kind, "type") == 0 ? static_cast<ncclDataType_t>(97) : ncclFloat32;
    const auto rop =
        bad && std::strcmp(bad_kind, "op") == 0 ? static_cast<ncclRedOp_t>(99) : ncclSum;
    Clock::time_point t0 = Clock::now();
    r = reduce_scatter ? ncclReduceScatter(send, out.data(), out_count, type, rop, comm, nullptr)
                       : ncclAllReduce(send, out.data(), count, type, rop, comm, nullptr);
    const double secs = since(t0);
    if (r != ncclSuccess) {
      failed_at = since(t_start);
      std::printf("CALL %d ERR %d SECONDS %.2f MSG %s\n", c, static_cast<int>(r), secs,
                  ncclGetLastError(comm));
      rc = 3;
      break;
    }
    double worst = 0, biggest = 0;
    for (size_t i = 0; i < out_count; ++i) {
      double exact = 0;
      for (int q = 0; q < nranks; ++q)
        exact += input(q, out_offset + i, c);
      biggest = std::fmax(biggest, std::fabs(exact));
      double e = std::fabs(out[i] - exact);
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
    if (worst > tol * std::fmax(biggest, 1.0)) {
      std::printf("CALL %d WRONG largest error %g (allowed %g)\n", c, worst,
                  tol * std::fmax(biggest, 1.0));
      rc = 4;
      break;
    }
    std::printf("CALL %d OK HASH %016llx SECONDS %.2f\n", c,
                static_cast<unsigned long long>(
                    sketchccl::testing::fnv1a(out.data(), out.size() * sizeof(float))),
                secs);
    std::fflush(stdout);
  }
  if (aborter.joinable()) {
    aborter.join();
    // What the aborted communicator held (staging, transport buffers) must be freed: RSS beyond
    // the test's own buffers goes back to about where it was before init.
    const long held_kb = rss_kb() - rss_before - static_cast<long>((count + out_count) * 4 / 1024);
    std::printf("ABORTED AT %.2f CALL RETURNED AT %.2f RSS_DELTA_MB %.1f\n", aborted_at.load(),
                failed_at, held_kb / 1024.0);
  } else if (rc == 0) {
    ncclCommDestroy(comm);
  } else {
    ncclCommAbort(comm);
  }
  std::printf("DONE\n");
  return rc;
}
