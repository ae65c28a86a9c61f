#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fake_nccl/client_util.h"
#include "tests/fake_nccl/forward_cases.h"

namespace forward_client {

std::string hierarchy_phases(ncclComm_t comm, int rank, const std::string& init_log,
                             bool nonblocking) {
  const int L = 2, node = rank / L, local = rank % L;
  const size_t count = 262144, shard = count / L;
  void* cp = static_cast<void*>(comm);
  std::vector<float> x(count, static_cast<float>(rank + 1)), y(count, 0.0f);
  size_t at = log_size();
  ncclResult_t r =
      ncclAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSum, comm, fake_stream(0x70));
  std::string got = log_since(at);
  if (nonblocking) check("hier/parent-ready-after-the-call", wait_ready(comm) == ncclSuccess);
  const std::string split_line =
      fmt("ncclCommSplit comm=%p color=%d key=%d config=0x", cp, node, local);
  const size_t split = nonblocking ? got.find(split_line) : 0;
  check("hier/node-split-at-blocking-init-only",
        nonblocking ? init_log.find(split_line) == std::string::npos
                    : init_log.find(split_line) != std::string::npos &&
                          got.find("ncclCommSplit") == std::string::npos,
        "init log: " + init_log);
  const std::string rs = fmt(
      "ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=", static_cast<void*>(x.data()),
      static_cast<void*>(y.data() + local * shard), shard);
  const size_t rs_at = got.find(rs);
  std::string node_comm;
  if (rs_at != std::string::npos) {
    const size_t c0 = rs_at + rs.size();
    node_comm = got.substr(c0, got.find(' ', c0) - c0);
  }
  const size_t ag_at =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s "
                   "stream=0x70\n",
                   static_cast<void*>(y.data() + local * shard), static_cast<void*>(y.data()),
                   shard, node_comm.c_str()));
  const float want = static_cast<float>(local + 1 + L + local + 1);  // ranks local, L + local
  check("hier/split-reducescatter-allgather-in-order",
        enqueued(r) && split != std::string::npos && rs_at != std::string::npos &&
            got.find(rs + node_comm + " stream=0x70\n") != std::string::npos &&
            ag_at != std::string::npos && (!nonblocking || split < rs_at) && rs_at < ag_at &&
            node_comm != fmt("%p", cp) && got.find("ncclAllReduce send=") == std::string::npos,
        got);
  check("hier/rail-sums-the-shard-over-the-nodes", std::abs(y[0] - want) <= 0.05f * want,
        fmt("y[0] = %g, want %g", y[0], want));
  // In place, avg: no second split; NCCL's in-place forms; the stream is the caller's.
  at = log_size();
  r = ncclAllReduce(x.data(), x.data(), count, ncclFloat32, ncclAvg, comm, fake_stream(0x71));
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  check(
      "hier/in-place-avg-no-second-split",
      enqueued(r) && got.find("ncclCommSplit") == std::string::npos &&
          got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=%s "
                       "stream=0x71\n",
                       static_cast<void*>(x.data()), static_cast<void*>(x.data() + local * shard),
                       shard, static_cast<int>(ncclAvg), node_comm.c_str())) != std::string::npos &&
          got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x71\n",
                       static_cast<void*>(x.data() + local * shard), static_cast<void*>(x.data()),
                       shard, node_comm.c_str())) != std::string::npos,
      got);
  // Inside a group (as XLA issues every collective, and PyTorch's coalesced ones): nothing runs
  // until the group ends, then the same phases, after the real ncclGroupEnd.
  std::vector<float> g(count, static_cast<float>(rank + 1)), h(count, 0.0f);
  at = log_size();
  const ncclResult_t g1 = ncclGroupStart();
  const ncclResult_t g2 =
      ncclAllReduce(g.data(), h.data(), count, ncclFloat32, ncclSum, comm, fake_stream(0x73));
  const std::string in_group = log_since(at);
  const ncclResult_t g3 = ncclGroupEnd();
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  const size_t end_at = got.find("ncclGroupEnd\n");
  const size_t g_rs =
      got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=%s stream=0x73\n",
                   static_cast<void*>(g.data()), static_cast<void*>(h.data() + local * shard),
                   shard, node_comm.c_str()));
  const size_t g_ag =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x73\n",
                   static_cast<void*>(h.data() + local * shard), static_cast<void*>(h.data()),
                   shard, node_comm.c_str()));
  check("hier/grouped-phases-at-the-group-end",
        g1 == ncclSuccess && g2 == ncclSuccess && enqueued(g3) &&
            in_group.find("ncclReduceScatter") == std::string::npos &&
            end_at != std::string::npos && g_rs != std::string::npos && g_ag != std::string::npos &&
            end_at < g_rs && g_rs < g_ag && std::abs(h[0] - want) <= 0.05f * want,
        fmt("h[0] = %g; log: ", h[0]) + got);
  // A count that does not split into L shards: the divisible part through the phases, the tail
  // (one element here) by NCCL's AllReduce on the parent, after them.
  std::vector<float> a(count + 1, static_cast<float>(rank + 1)), b(count + 1, 0.0f);
  at = log_size();
  r = ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat32, ncclSum, comm, fake_stream(0x72));
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  const size_t odd_rs =
      got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=%s stream=0x72\n",
                   static_cast<void*>(a.data()), static_cast<void*>(b.data() + local * shard),
                   shard, node_comm.c_str()));
  const size_t odd_ag =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x72\n",
                   static_cast<void*>(b.data() + local * shard), static_cast<void*>(b.data()),
                   shard, node_comm.c_str()));
  const size_t odd_tail =
      got.find(fmt("ncclAllReduce send=%p recv=%p count=1 type=7 op=0 comm=%p stream=0x72\n",
                   static_cast<void*>(a.data() + count), static_cast<void*>(b.data() + count), cp));
  check("hier/odd-count-phases-then-the-tail-by-nccl",
        enqueued(r) && odd_rs != std::string::npos && odd_ag != std::string::npos &&
            odd_tail != std::string::npos && odd_rs < odd_ag && odd_ag < odd_tail &&
            std::abs(b[0] - want) <= 0.05f * want && b[count] == static_cast<float>(rank + 1),
        fmt("b[0] = %g, b[count] = %g; log: ", b[0], b[count]) + got);
  return node_comm;
}

void hierarchy_reduce_scatter(ncclComm_t comm, int rank, const std::string& node_comm,
                              bool nonblocking) {
  const int L = 2, N = 2, P = 4, node = rank / L, local = rank % L;
  const size_t recvcount = 65537, count = recvcount * P;  // odd; the input above 1 MiB
  auto value = [](int r, size_t chunk) { return static_cast<float>(r + 1 + 10 * chunk); };
  const size_t own = static_cast<size_t>(node * L);
  const float sum = value(local, own) + value(L + local, own);
  for (int mode = 0; mode < 3; ++mode) {
    const bool inplace = mode == 1, grouped = mode == 2;
    const ncclRedOp_t op = inplace ? ncclAvg : ncclSum;
    std::vector<float> x(count), y(recvcount, 0.0f);
    for (size_t i = 0; i < count; ++i)
      x[i] = value(rank, i / recvcount);
    float* out = inplace ? x.data() + static_cast<size_t>(rank) * recvcount : y.data();
    cudaStream_t stream = fake_stream(static_cast<uintptr_t>(0x74 + mode));
    size_t at = log_size();
    ncclResult_t g1 = ncclSuccess, g2 = ncclSuccess;
    if (grouped) g1 = ncclGroupStart();
    ncclResult_t r = ncclReduceScatter(x.data(), out, recvcount, ncclFloat32, op, comm, stream);
    const std::string in_group = log_since(at);
    if (grouped) g2 = ncclGroupEnd();
    std::string got = log_since(at);
    if (nonblocking) (void)wait_ready(comm);
    const size_t rs_at = got.find("ncclReduceScatter send=");
    void *s = nullptr, *d = nullptr;
    size_t n = 0;
    int type = -1, got_op = -1;
    char c[64] = {0}, st[64] = {0};
    const bool parsed =
        rs_at != std::string::npos &&
        std::sscanf(got.c_str() + rs_at,
                    "ncclReduceScatter send=%p recv=%p count=%zu type=%d op=%d comm=%63s "
                    "stream=%63s",
                    &s, &d, &n, &type, &got_op, c, st) == 7;
    const auto* sb = static_cast<const uint8_t*>(s);
    const bool call_ok =
        parsed && s != static_cast<void*>(x.data()) &&
        static_cast<const uint8_t*>(d) == sb + static_cast<size_t>(local) * N * recvcount * 4 &&
        n == N * recvcount && type == 7 && got_op == static_cast<int>(op) && node_comm == c &&
        fmt("%p", static_cast<void*>(stream)) == st &&
        got.find("ncclReduceScatter", rs_at + 1) == std::string::npos &&
        got.find("ncclAllGather") == std::string::npos &&
        got.find("ncclAllReduce") == std::string::npos;
    const float want = inplace ? sum / N : sum;
    const bool value_ok = std::abs(out[0] - want) <= 0.05f * want &&
                          std::abs(out[recvcount - 1] - want) <= 0.05f * want;
    const bool group_ok = !grouped || (g1 == ncclSuccess && enqueued(g2) &&
                                       in_group.find("ncclReduceScatter") == std::string::npos &&
                                       got.find("ncclGroupEnd\n") < rs_at);
    check(std::string("hier/reduce-scatter-") + (inplace   ? "in-place-avg"
                                                 : grouped ? "grouped"
                                                           : "apart"),
          enqueued(r) && call_ok && value_ok && group_ok,
          fmt("out[0] = %g, want %g; log: ", out[0], want) + got);
  }
}

}  // namespace forward_client
