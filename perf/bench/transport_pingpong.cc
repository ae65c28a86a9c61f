// Ping-pong latency and bandwidth of one SketchCCL transport between two processes on this
// machine (loopback): the process given no --rank makes a unique id, starts rank 1 as a copy
// of itself and plays rank 0. Prints one line per size:
//   <bytes> <median one-way latency us> <mean one-way latency us> <MB/s = bytes / median>
// Usage: sccl-transport-pingpong [--transport socket|ucx] [--min 8] [--max 67108864]
// (SKETCHCCL_SOCKET_IFNAME defaults to lo here; UCX reads UCX_TLS etc. as usual.)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "transport/transport.h"

using namespace sketchccl;
using transport::RequestId;
using transport::Transport;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string to_hex(const uint8_t* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", p[i]);
    s += b;
  }
  return s;
}

bool from_hex(const std::string& s, uint8_t* p, size_t n) {
  if (s.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

Status wait(Transport* t, RequestId id) {
  while (true) {
    SCCL_RETURN_IF_ERROR(t->progress());
    bool done = false;
    size_t n = 0;
    Status st = t->test(id, &done, &n);
    if (done || !st.ok()) return st;
  }
}

int die(const char* what, const Status& st) {
  std::fprintf(stderr, "sccl-transport-pingpong: %s: %s\n", what, st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind = "socket", idhex;
  int rank = -1;
  size_t min_size = 8, max_size = size_t{64} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--transport")
      kind = v;
    else if (a == "--rank")
      rank = std::atoi(v.c_str());
    else if (a == "--id")
      idhex = v;
    else if (a == "--min")
      min_size = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--max")
      max_size = std::strtoull(v.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  setenv("SKETCHCCL_SOCKET_IFNAME", "lo", 0);
  uint8_t id[bootstrap::kUniqueIdBytes] = {0};
  bootstrap::Options bo;
  bo.timeout_s = 60;
  bo.ifname = getenv("SKETCHCCL_SOCKET_IFNAME");
  pid_t child = -1;
  if (rank < 0) {
    rank = 0;
    Status st = bootstrap::create_root(id, bo);
    if (!st.ok()) return die("create_root", st);
    child = fork();
    if (child == 0) {
      std::string hex = to_hex(id, sizeof id);
      std::string mn = std::to_string(min_size), mx = std::to_string(max_size);
      execl("/proc/self/exe", argv[0], "--transport", kind.c_str(), "--rank", "1", "--id",
            hex.c_str(), "--min", mn.c_str(), "--max", mx.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  } else if (!from_hex(idhex, id, sizeof id)) {
    std::fprintf(stderr, "bad --id\n");
    return 2;
  }
  int peer = 1 - rank;
  transport::TransportOptions to;
  to.kind = kind;
  to.rank = rank;
  to.nranks = 2;
  to.timeout_s = 60;
  to.ifname = bo.ifname;
  std::unique_ptr<Transport> t;
  Status st = transport::create_transport(to, &t);
  if (!st.ok()) return die("create_transport", st);
  bootstrap::JoinResult table;
  st = bootstrap::join(id, rank, 2, t->address(), 0, bo, &table);
  if (!st.ok()) return die("bootstrap", st);
  st = t->connect(peer, table.addresses[peer]);
  if (!st.ok()) return die("connect", st);

  std::vector<uint8_t> sbuf(max_size, 0x5a), rbuf(max_size);
  if (rank == 0) std::printf("# %s transport: bytes median_us mean_us MB/s\n", t->name());
  uint64_t tag = 1;
  std::vector<size_t> sizes;
  for (size_t size = min_size; size <= max_size; size *= 8)
    sizes.push_back(size);
  if (sizes.empty() || sizes.back() != max_size) sizes.push_back(max_size);
  for (size_t size : sizes) {
    int iters = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / size, 8, 20000));
    int warmup = std::max(2, iters / 10);
    std::vector<double> times;
    for (int it = 0; it < warmup + iters; ++it, ++tag) {
      RequestId s, r;
      double t0 = now_s();
      if (rank == 0) {
        if (!(st = t->irecv(peer, tag, rbuf.data(), size, &r)).ok()) break;
        if (!(st = t->isend(peer, tag, sbuf.data(), size, &s)).ok()) break;
        if (!(st = wait(t.get(), s)).ok() || !(st = wait(t.get(), r)).ok()) break;
      } else {
        if (!(st = t->irecv(peer, tag, rbuf.data(), size, &r)).ok()) break;
        if (!(st = wait(t.get(), r)).ok()) break;
        if (!(st = t->isend(peer, tag, sbuf.data(), size, &s)).ok()) break;
        if (!(st = wait(t.get(), s)).ok()) break;
      }
      if (it >= warmup) times.push_back((now_s() - t0) / 2);
    }
    if (!st.ok()) return die("ping-pong", st);
    if (rank == 0) {
      std::vector<double> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      double mean = 0;
      for (double x : times)
        mean += x;
      mean /= static_cast<double>(times.size());
      double median = sorted[sorted.size() / 2];
      std::printf("%zu %.3f %.3f %.1f\n", size, median * 1e6, mean * 1e6,
                  static_cast<double>(size) / median / 1e6);
      std::fflush(stdout);
    }
  }
  t->close();
  if (child > 0) {
    int ws = 0;
    waitpid(child, &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      std::fprintf(stderr, "rank 1 failed\n");
      return 1;
    }
  }
  return 0;
}
