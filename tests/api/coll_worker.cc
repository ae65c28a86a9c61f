// One rank of the multi-process tests of standalone mode's exact collectives and point-to-point
// calls, through nccl.h only (linked against libsketchccl.so). The driver (collectives_test.cc)
// starts P of these; every case runs inside this one process (no process per case).
//
//   coll_worker SCENARIO RANK NRANKS ID_HEX [ARGS...]
//   coll_worker group1 NRANKS      (one thread drives every rank)
//   coll_worker matrix1 TYPES COUNTS...   (the matrix on one rank)
//
// A case's HASH is of the results every rank shares (AllReduce, Broadcast, AllGather), else of
// its name; each rank checks its own results against values computed from everyone's inputs.
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/all_types.h"
#include "tests/api/rank_report.h"

namespace {

using sketchccl::testing::any_integer;
using sketchccl::testing::any_load;
using sketchccl::testing::any_name;
using sketchccl::testing::any_size;
using sketchccl::testing::any_store;
using sketchccl::testing::any_tolerance;
using sketchccl::testing::any_unsigned;
using sketchccl::testing::fnv1a;
using sketchccl::testing::g_case_failures;

int g_rank = 0, g_nranks = 1;

uint64_t mix(int r, size_t i, uint64_t salt) {
  uint64_t h = (static_cast<uint64_t>(r + 1) * 0x9e3779b97f4a7c15ull) ^
               ((i + 1) * 0xbf58476d1ce4e5b9ull) ^ (salt * 0x94d049bb133111ebull);
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return h;
}

// Rank r's element i: small integers, exact in every type and in every reduction of up to 4.
double value(ncclDataType_t t, ncclRedOp_t op, int r, size_t i) {
  const uint64_t h = mix(r, i, static_cast<uint64_t>(t));
  if (op == ncclProd) {
    static const double s[] = {1, 2, -1, -2};
    return any_unsigned(t) ? 1 + static_cast<double>(h % 2) : s[h % 4];
  }
  return any_unsigned(t) ? static_cast<double>(h % 5) : static_cast<double>(h % 5) - 2;
}

const int kPreMul = -1;  // stands for the created PreMulSum op (scalar 2) in the op lists
const double kScalar = 2;

// The reduction of element i over every rank, as NCCL defines the op.
double reduced(ncclDataType_t t, int op, size_t i) {
  const ncclRedOp_t vop = op == kPreMul ? ncclSum : static_cast<ncclRedOp_t>(op);
  double acc = value(t, vop, 0, i);
  for (int r = 1; r < g_nranks; ++r) {
    const double v = value(t, vop, r, i);
    if (op == ncclProd) {
      acc *= v;
    } else if (op == ncclMax) {
      acc = std::max(acc, v);
    } else if (op == ncclMin) {
      acc = std::min(acc, v);
    } else {
      acc += v;
    }
  }
  if (op == kPreMul) acc *= kScalar;
  if (op == ncclAvg) acc = any_integer(t) ? std::trunc(acc / g_nranks) : acc / g_nranks;
  return acc;
}

bool close_to(ncclDataType_t t, double got, double want, bool rounded) {
  if (!rounded) return got == want;
  return std::fabs(got - want) <= any_tolerance(t) * std::fabs(want);
}

struct Buf {
  std::vector<uint8_t> bytes;
  Buf(ncclDataType_t t, size_t n) : bytes(n * any_size(t) + 1, 0xee) {}  // never empty
  void* at(ncclDataType_t t, size_t elem) { return bytes.data() + elem * any_size(t); }
};

// One case's verdict and the bytes its HASH covers.
struct Verdict {
  std::string why;
  uint64_t hash = 0;
  void fail(const std::string& w) {
    if (why.empty()) why = w;
  }
  void mix_in(const void* p, size_t n) { hash = hash * 31 + fnv1a(p, n); }
};

const char* op_name(int op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op == kPreMul ? "premul" : names[op];
}

// Checks `got` (n elements) against want(i) at every element.
template <typename F>
void check(Verdict* v, ncclDataType_t t, const void* got, size_t n, F want, bool rounded,
           const char* what) {
  for (size_t i = 0; i < n; ++i) {
    const double g = any_load(t, got, i), w = want(i);
    if (!close_to(t, g, w, rounded)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: element %zu is %g, want %g", what, i, g, w);
      v->fail(buf);
      return;
    }
  }
}

ncclResult_t g_last = ncclSuccess;
bool call_ok(Verdict* v, ncclResult_t r, const char* what) {
  g_last = r;
  if (r == ncclSuccess) return true;
  v->fail(std::string(what) + " -> " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) +
          ")");
  return false;
}

// The reductions: AllReduce, Reduce and ReduceScatter, out of place and in place.
void reductions(ncclComm_t comm, ncclDataType_t t, int op_id, size_t n, Verdict* v) {
  const size_t p = static_cast<size_t>(g_nranks);
  ncclRedOp_t op = static_cast<ncclRedOp_t>(op_id);
  const ncclRedOp_t vop = op_id == kPreMul ? ncclSum : op;
  if (op_id == kPreMul) {
    std::vector<uint8_t> scalar(8);
    any_store(t, scalar.data(), 0, kScalar);
    if (!call_ok(v, ncclRedOpCreatePreMulSum(&op, scalar.data(), t, ncclScalarHostImmediate, comm),
                 "create")) {
      return;
    }
  }
  const bool rounded = !any_integer(t) && op_id == ncclAvg;
  auto want = [&](size_t i) { return reduced(t, op_id, i); };
  const int root = g_nranks - 1;
  for (int in_place = 0; in_place < 2; ++in_place) {
    // AllReduce.
    Buf send(t, n), recv(t, n);
    for (size_t i = 0; i < n; ++i)
      any_store(t, send.at(t, 0), i, value(t, vop, g_rank, i));
    void* out = in_place ? send.at(t, 0) : recv.at(t, 0);
    if (call_ok(v, ncclAllReduce(send.at(t, 0), out, n, t, op, comm, nullptr), "AllReduce")) {
      check(v, t, out, n, want, rounded, "AllReduce");
      v->mix_in(out, n * any_size(t));
    }
    // Reduce to the last rank.
    for (size_t i = 0; i < n; ++i)
      any_store(t, send.at(t, 0), i, value(t, vop, g_rank, i));
    out = in_place ? send.at(t, 0) : recv.at(t, 0);
    if (call_ok(v, ncclReduce(send.at(t, 0), out, n, t, op, root, comm, nullptr), "Reduce") &&
        g_rank == root) {
      check(v, t, out, n, want, rounded, "Reduce");
    }
    // ReduceScatter: recvcount n, rank r's chunk starts at r * n.
    Buf big(t, n * p), chunk(t, n);
    for (size_t i = 0; i < n * p; ++i)
      any_store(t, big.at(t, 0), i, value(t, vop, g_rank, i));
    out = in_place ? big.at(t, static_cast<size_t>(g_rank) * n) : chunk.at(t, 0);
    if (call_ok(v, ncclReduceScatter(big.at(t, 0), out, n, t, op, comm, nullptr),
                "ReduceScatter")) {
      const size_t first = static_cast<size_t>(g_rank) * n;
      check(
          v, t, out, n, [&](size_t i) { return want(first + i); }, rounded, "ReduceScatter");
    }
  }
  if (op_id == kPreMul) call_ok(v, ncclRedOpDestroy(op, comm), "destroy");
}

// The data movements: Broadcast/Bcast, AllGather, AlltoAll, Gather, Scatter.
void movements(ncclComm_t comm, ncclDataType_t t, size_t n, Verdict* v) {
  const size_t p = static_cast<size_t>(g_nranks);
  const int root = g_nranks > 1 ? 1 : 0;
  auto val = [&](int r, size_t i) { return value(t, ncclSum, r, i); };
  for (int in_place = 0; in_place < 2; ++in_place) {
    Buf a(t, n * p), b(t, n * p);
    // Broadcast (in place: ncclBcast).
    for (size_t i = 0; i < n; ++i)
      any_store(t, a.at(t, 0), i, val(g_rank, i));
    void* out = in_place ? a.at(t, 0) : b.at(t, 0);
    const ncclResult_t br = in_place ? ncclBcast(a.at(t, 0), n, t, root, comm, nullptr)
                                     : ncclBroadcast(a.at(t, 0), out, n, t, root, comm, nullptr);
    if (call_ok(v, br, "Broadcast")) {
      check(
          v, t, out, n, [&](size_t i) { return val(root, i); }, false, "Broadcast");
      v->mix_in(out, n * any_size(t));
    }
    // AllGather: in place, this rank's part already sits at rank * n.
    void* in = in_place ? b.at(t, static_cast<size_t>(g_rank) * n) : a.at(t, 0);
    for (size_t i = 0; i < n; ++i)
      any_store(t, in, i, val(g_rank, i));
    if (call_ok(v, ncclAllGather(in, b.at(t, 0), n, t, comm, nullptr), "AllGather")) {
      check(
          v, t, b.at(t, 0), n * p, [&](size_t i) { return val(static_cast<int>(i / n), i % n); },
          false, "AllGather");
      v->mix_in(b.at(t, 0), n * p * any_size(t));
    }
    // AlltoAll: block j of rank r goes to rank j.
    for (size_t i = 0; i < n * p; ++i)
      any_store(t, a.at(t, 0), i, val(g_rank, i));
    out = in_place ? a.at(t, 0) : b.at(t, 0);
    if (call_ok(v, ncclAlltoAll(a.at(t, 0), out, n, t, comm, nullptr), "AlltoAll")) {
      check(
          v, t, out, n * p,
          [&](size_t i) {
            return val(static_cast<int>(i / n), static_cast<size_t>(g_rank) * n + i % n);
          },
          false, "AlltoAll");
    }
    // Gather to root (in place: the root's part sits at root * n of recvbuff).
    in = in_place && g_rank == root ? b.at(t, static_cast<size_t>(root) * n) : a.at(t, 0);
    for (size_t i = 0; i < n; ++i)
      any_store(t, in, i, val(g_rank, i));
    if (call_ok(v, ncclGather(in, b.at(t, 0), n, t, root, comm, nullptr), "Gather") &&
        g_rank == root) {
      check(
          v, t, b.at(t, 0), n * p, [&](size_t i) { return val(static_cast<int>(i / n), i % n); },
          false, "Gather");
    }
    // Scatter from root (in place: the root receives into its own part of sendbuff).
    for (size_t i = 0; i < n * p; ++i)
      any_store(t, a.at(t, 0), i, val(g_rank, i));
    out = in_place && g_rank == root ? a.at(t, static_cast<size_t>(root) * n) : b.at(t, 0);
    if (call_ok(v, ncclScatter(a.at(t, 0), out, n, t, root, comm, nullptr), "Scatter")) {
      check(
          v, t, out, n, [&](size_t i) { return val(root, static_cast<size_t>(g_rank) * n + i); },
          false, "Scatter");
    }
  }
}

void report(const std::string& name, const Verdict& v, bool shared) {
  const std::string verdict = v.why.empty() ? "OK" : "FAIL " + v.why;
  if (shared) {
    sketchccl::testing::report_case(name, &v.hash, sizeof v.hash, verdict);
  } else {
    sketchccl::testing::report_case(name, name.data(), name.size(), verdict);
  }
}

std::vector<ncclDataType_t> types_from(const std::string& list) {
  std::vector<ncclDataType_t> out;
  for (int t = 0; t < ncclNumTypes; ++t) {
    if (list == "all" || list.find(any_name(static_cast<ncclDataType_t>(t))) != std::string::npos)
      out.push_back(static_cast<ncclDataType_t>(t));
  }
  return out;
}

// Every type (of `types`) and op at every count, out of place and in place.
int scenario_matrix(ncclComm_t comm, const std::string& types, const std::vector<size_t>& counts) {
  for (ncclDataType_t t : types_from(types)) {
    for (int op : {0, 1, 2, 3, 4, kPreMul}) {
      Verdict v;
      for (size_t n : counts)
        reductions(comm, t, op, n, &v);
      report(std::string("reduce-") + any_name(t) + "-" + op_name(op), v, true);
    }
    Verdict v;
    for (size_t n : counts)
      movements(comm, t, n, &v);
    report(std::string("move-") + any_name(t), v, true);
  }
  return 0;
}

// Blocking send/recv pairs outside groups, and a group that mixes collectives with a ring
// exchange, two messages to one peer (matched in order) and a send to itself.
int scenario_p2p(ncclComm_t comm) {
  const int right = (g_rank + 1) % g_nranks, left = (g_rank - 1 + g_nranks) % g_nranks;
  Verdict v;
  // Rank 0 sends each rank its number of elements, one call at a time; count 0 included.
  for (int q = 1; q < g_nranks; ++q) {
    std::vector<int32_t> buf(static_cast<size_t>(q) * 1000 + 1);
    if (g_rank == 0) {
      for (size_t i = 0; i < buf.size(); ++i)
        buf[i] = static_cast<int32_t>(q * 7 + static_cast<int>(i));
      call_ok(&v, ncclSend(buf.data(), buf.size(), ncclInt32, q, comm, nullptr), "Send");
      call_ok(&v, ncclSend(nullptr, 0, ncclInt32, q, comm, nullptr), "Send 0");
    } else if (g_rank == q) {
      call_ok(&v, ncclRecv(buf.data(), buf.size(), ncclInt32, 0, comm, nullptr), "Recv");
      for (size_t i = 0; i < buf.size(); ++i) {
        if (buf[i] != static_cast<int32_t>(q * 7 + static_cast<int>(i))) v.fail("Recv data");
      }
      call_ok(&v, ncclRecv(nullptr, 0, ncclInt32, 0, comm, nullptr), "Recv 0");
    }
  }
  report("p2p-blocking", v, false);

  Verdict g;
  const size_t big = (size_t(5) << 20) / 8 + 3;  // more than one transfer piece
  std::vector<double> to_right(big), from_left(big, -1);
  std::vector<int64_t> small_a(17, g_rank), small_b(5, g_rank * 10), got_a(17, -1), got_b(5, -1);
  std::vector<float> self_out(33, static_cast<float>(g_rank) + 0.5f), self_in(33, 0);
  std::vector<int32_t> ar(1001), ag(static_cast<size_t>(g_nranks) * 3);
  const int32_t mine3[3] = {g_rank, g_rank + 100, g_rank + 200};
  for (size_t i = 0; i < big; ++i)
    to_right[i] = g_rank * 1e6 + static_cast<double>(i);
  for (size_t i = 0; i < ar.size(); ++i)
    ar[i] = static_cast<int32_t>(value(ncclInt32, ncclMax, g_rank, i));
  call_ok(&g, ncclGroupStart(), "GroupStart");
  call_ok(&g, ncclAllReduce(ar.data(), ar.data(), ar.size(), ncclInt32, ncclMax, comm, nullptr),
          "AllReduce");
  call_ok(&g, ncclRecv(from_left.data(), big, ncclFloat64, left, comm, nullptr), "Recv big");
  call_ok(&g, ncclSend(to_right.data(), big, ncclFloat64, right, comm, nullptr), "Send big");
  // Two messages to the right neighbour: the first receive gets the first send.
  call_ok(&g, ncclSend(small_a.data(), 17, ncclInt64, right, comm, nullptr), "Send a");
  call_ok(&g, ncclSend(small_b.data(), 5, ncclInt64, right, comm, nullptr), "Send b");
  call_ok(&g, ncclRecv(got_a.data(), 17, ncclInt64, left, comm, nullptr), "Recv a");
  call_ok(&g, ncclRecv(got_b.data(), 5, ncclInt64, left, comm, nullptr), "Recv b");
  call_ok(&g, ncclSend(self_out.data(), 33, ncclFloat32, g_rank, comm, nullptr), "Send self");
  call_ok(&g, ncclRecv(self_in.data(), 33, ncclFloat32, g_rank, comm, nullptr), "Recv self");
  call_ok(&g, ncclAllGather(mine3, ag.data(), 3, ncclInt32, comm, nullptr), "AllGather");
  call_ok(&g, ncclGroupEnd(), "GroupEnd");
  for (size_t i = 0; i < big; ++i) {
    if (from_left[i] != left * 1e6 + static_cast<double>(i)) {
      g.fail("big message");
      break;
    }
  }
  if (got_a != std::vector<int64_t>(17, left) || got_b != std::vector<int64_t>(5, left * 10)) {
    g.fail("the two messages were not matched in order");
  }
  if (self_in != self_out) g.fail("send to self");
  for (size_t i = 0; i < ar.size(); ++i) {
    if (ar[i] != reduced(ncclInt32, ncclMax, i)) g.fail("AllReduce max in the group");
  }
  for (int q = 0; q < g_nranks; ++q) {
    if (ag[static_cast<size_t>(q) * 3 + 1] != q + 100) g.fail("AllGather in the group");
  }
  report("p2p-group-mixed", g, false);
  return 0;
}

// Bad input: NCCL's error codes, and the communicator stays usable.
int scenario_bad(ncclComm_t comm) {
  std::vector<int32_t> a(64, 1), b(64 * static_cast<size_t>(g_nranks), 0);
  auto expect = [&](const char* name, ncclResult_t got, ncclResult_t want) {
    Verdict v;
    if (got != want) {
      v.fail(std::string("got ") + ncclGetErrorString(got) + ", want " + ncclGetErrorString(want));
    } else if (want != ncclSuccess && std::strlen(ncclGetLastError(comm)) == 0) {
      v.fail("no message in ncclGetLastError");
    }
    report(name, v, false);
  };
  const auto bad_type = static_cast<ncclDataType_t>(ncclNumTypes);
  const auto bad_op = static_cast<ncclRedOp_t>(ncclNumOps + 7);
  expect("bad-null-allreduce",
         ncclAllReduce(nullptr, a.data(), 64, ncclInt32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-null-reduce", ncclReduce(nullptr, a.data(), 64, ncclInt32, ncclSum, 0, comm, nullptr),
         ncclInvalidArgument);
  // Only the root's recvbuff counts; only the root's sendbuff for Broadcast.
  expect("reduce-null-recv-off-root",
         ncclReduce(a.data(), g_rank == 0 ? b.data() : nullptr, 64, ncclInt32, ncclSum, 0, comm,
                    nullptr),
         ncclSuccess);
  expect("broadcast-null-send-off-root",
         ncclBroadcast(g_rank == 0 ? a.data() : nullptr, b.data(), 64, ncclInt32, 0, comm, nullptr),
         ncclSuccess);
  expect("bad-null-allgather", ncclAllGather(a.data(), nullptr, 64, ncclInt32, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-null-send", ncclSend(nullptr, 5, ncclInt32, 0, comm, nullptr), ncclInvalidArgument);
  expect("bad-null-alltoall", ncclAlltoAll(nullptr, b.data(), 1, ncclInt32, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-root-low", ncclBroadcast(a.data(), a.data(), 64, ncclInt32, -1, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-root-high",
         ncclReduce(a.data(), a.data(), 64, ncclInt32, ncclSum, g_nranks, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-root-gather", ncclGather(a.data(), b.data(), 1, ncclInt32, g_nranks, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-root-scatter", ncclScatter(b.data(), a.data(), 1, ncclInt32, -3, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-peer", ncclSend(a.data(), 1, ncclInt32, g_nranks, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-peer-recv", ncclRecv(a.data(), 1, ncclInt32, -1, comm, nullptr), ncclInvalidArgument);
  expect("bad-type", ncclAllGather(a.data(), b.data(), 1, bad_type, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-type-allreduce",
         ncclAllReduce(a.data(), a.data(), 1, bad_type, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-op", ncclAllReduce(a.data(), a.data(), 64, ncclInt32, bad_op, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-op-float", ncclAllReduce(a.data(), a.data(), 16, ncclFloat32, bad_op, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-op-destroy", ncclRedOpDestroy(bad_op, comm), ncclInvalidArgument);
  ncclRedOp_t made;
  int32_t two = 2;
  expect("premul-create",
         ncclRedOpCreatePreMulSum(&made, &two, ncclInt32, ncclScalarHostImmediate, comm),
         ncclSuccess);
  expect("premul-wrong-type",
         ncclReduceScatter(b.data(), a.data(), 1, ncclFloat64, made, comm, nullptr),
         ncclInvalidArgument);
  expect("premul-destroy", ncclRedOpDestroy(made, comm), ncclSuccess);
  expect("premul-destroyed-use",
         ncclAllReduce(a.data(), a.data(), 64, ncclInt32, made, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-overlap",
         ncclAllGather(b.data() + 1, b.data(), 64 / g_nranks, ncclInt32, comm, nullptr),
         ncclInvalidArgument);
  expect("bad-comm", ncclBroadcast(a.data(), a.data(), 64, ncclInt32, 0, nullptr, nullptr),
         ncclInvalidArgument);
  void* mem = nullptr;
  expect("memalloc", ncclMemAlloc(&mem, 1000), ncclSuccess);
  expect("memalloc-null", ncclMemAlloc(nullptr, 1000), ncclInvalidArgument);
  // Host memory aligned to 4 KiB here; device memory (cudaMalloc) where a GPU is: both at least
  // 256-byte aligned. Not touched: it may be device memory.
  Verdict aligned;
  if (mem == nullptr || reinterpret_cast<uintptr_t>(mem) % 256 != 0) aligned.fail("alignment");
  report("memalloc-aligned", aligned, false);
  expect("memfree", ncclMemFree(mem), ncclSuccess);
  void* handle = nullptr;
  ncclWindow_t win = nullptr;
  expect("register", ncclCommRegister(comm, a.data(), 256, &handle), ncclSuccess);
  expect("deregister", ncclCommDeregister(comm, handle), ncclSuccess);
  expect("window-register", ncclCommWindowRegister(comm, a.data(), 256, &win, 0), ncclSuccess);
  expect("window-deregister", ncclCommWindowDeregister(comm, win), ncclSuccess);
  // Still usable: a broadcast from the last rank.
  Verdict usable;
  std::vector<int32_t> c(100, g_rank);
  if (call_ok(&usable, ncclBcast(c.data(), 100, ncclInt32, g_nranks - 1, comm, nullptr), "Bcast") &&
      c != std::vector<int32_t>(100, g_nranks - 1)) {
    usable.fail("Bcast result");
  }
  report("usable-after-bad-input", usable, false);
  return 0;
}

// The ranks disagree on the count of an AllGather (and of an int AllReduce): every rank fails.
int scenario_mismatch(ncclComm_t comm, const std::string& which) {
  const size_t n = 4096 + static_cast<size_t>(g_rank) * 64;
  std::vector<int64_t> send(n, 1), recv(n * static_cast<size_t>(g_nranks) + 64 * 8);
  ncclResult_t r =
      which == "allreduce"
          ? ncclAllReduce(send.data(), recv.data(), n, ncclInt64, ncclMax, comm, nullptr)
          : ncclAllGather(send.data(), recv.data(), n, ncclInt64, comm, nullptr);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  Verdict v;
  if (r == ncclSuccess || async == ncclSuccess) v.fail("no error");
  report("mismatch-" + which + "-fails", v, false);
  std::printf("INFO rank %d: %s / %s: %s\n", g_rank, ncclGetErrorString(r),
              ncclGetErrorString(async), ncclGetLastError(comm));
  return 1;  // failed communicator: abort at exit
}

// The last rank dies during a stream of large AllGathers; the others fail in time and abort.
int scenario_kill(ncclComm_t comm, size_t n) {
  std::vector<int32_t> send(n, g_rank), recv(n * static_cast<size_t>(g_nranks));
  if (g_rank == g_nranks - 1) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      raise(SIGKILL);
    }).detach();
  }
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 1000 && r == ncclSuccess; ++i)
    r = ncclAllGather(send.data(), recv.data(), n, ncclInt32, comm, nullptr);
  std::printf("INFO rank %d: %s\n", g_rank, ncclGetLastError(comm));
  Verdict v;
  if (r == ncclSuccess) v.fail("no error");
  report("killed-peer-gives-error", v, false);
  const auto a0 = std::chrono::steady_clock::now();
  ncclCommAbort(comm);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
  Verdict prompt;
  if (secs >= 2.0) prompt.fail("abort took long");
  report("abort-is-prompt", prompt, false);
  return 1;
}

// One thread drives every rank (ncclCommInitAll) in one group: per rank a ring exchange of
// sends and receives, a Broadcast and an int64 AllReduce; all complete at ncclGroupEnd.
int scenario_group_one_thread(int nranks) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(nranks));
  NCCL_OK(ncclCommInitAll(comms.data(), nranks, nullptr));
  const size_t n = 100003;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(nranks)), in(out.size()),
      bc(out.size()), ar(out.size());
  for (int r = 0; r < nranks; ++r) {
    out[static_cast<size_t>(r)].assign(n, r);
    in[static_cast<size_t>(r)].assign(n, -1);
    bc[static_cast<size_t>(r)].assign(n, r == 0 ? 42 : 0);
    ar[static_cast<size_t>(r)].assign(n, r + 1);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    const size_t i = static_cast<size_t>(r);
    NCCL_OK(ncclSend(out[i].data(), n, ncclInt64, (r + 1) % nranks, comms[i], nullptr));
    NCCL_OK(ncclRecv(in[i].data(), n, ncclInt64, (r - 1 + nranks) % nranks, comms[i], nullptr));
    NCCL_OK(ncclBcast(bc[i].data(), n, ncclInt64, 0, comms[i], nullptr));
    NCCL_OK(ncclAllReduce(ar[i].data(), ar[i].data(), n, ncclInt64, ncclProd, comms[i], nullptr));
  }
  NCCL_OK(ncclGroupEnd());
  Verdict v;
  int64_t prod = 1;
  for (int r = 0; r < nranks; ++r)
    prod *= r + 1;
  for (int r = 0; r < nranks; ++r) {
    const size_t i = static_cast<size_t>(r);
    if (in[i] != std::vector<int64_t>(n, (r - 1 + nranks) % nranks)) v.fail("ring exchange");
    if (bc[i] != std::vector<int64_t>(n, 42)) v.fail("Bcast");
    if (ar[i] != std::vector<int64_t>(n, prod)) v.fail("AllReduce prod");
  }
  report("group-one-thread", v, false);
  for (ncclComm_t c : comms)
    NCCL_OK(ncclCommDestroy(c));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "group1") {
    alarm(300);
    return scenario_group_one_thread(std::atoi(argv[2])) || g_case_failures ? 1 : 0;
  }
  if (argc >= 4 && std::string(argv[1]) == "matrix1") {  // one rank, no rendezvous
    alarm(300);
    ncclComm_t comm = nullptr;
    NCCL_OK(ncclCommInitAll(&comm, 1, nullptr));
    std::vector<size_t> counts;
    for (int i = 3; i < argc; ++i)
      counts.push_back(std::strtoull(argv[i], nullptr, 10));
    scenario_matrix(comm, argv[2], counts);
    NCCL_OK(ncclCommDestroy(comm));
    return g_case_failures ? 1 : 0;
  }
  sketchccl::testing::WorkerArgs wa;
  if (!sketchccl::testing::parse_worker_args(argc, argv, &wa)) return 2;
  g_rank = wa.rank;
  g_nranks = wa.nranks;
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, wa.id, g_rank));
  int rc = 0;
  const std::string& s = wa.scenario;
  if (s == "matrix" && argc >= 7) {
    std::vector<size_t> counts;
    for (int i = 6; i < argc; ++i)
      counts.push_back(std::strtoull(argv[i], nullptr, 10));
    rc = scenario_matrix(comm, argv[5], counts);
  } else if (s == "p2p") {
    rc = scenario_p2p(comm);
  } else if (s == "bad") {
    rc = scenario_bad(comm);
  } else if (s == "mismatch" && argc >= 6) {
    rc = scenario_mismatch(comm, argv[5]);
  } else if (s == "kill" && argc >= 6) {
    rc = scenario_kill(comm, std::strtoull(argv[5], nullptr, 10));
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", s.c_str());
    return 2;
  }
  if (rc == 0) {
    NCCL_OK(ncclCommDestroy(comm));
  } else if (s == "mismatch") {
    ncclCommAbort(comm);
  }
  return g_case_failures ? 1 : 0;
}
