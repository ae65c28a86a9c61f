// One rank of a soak run (tests/soak/soak.sh, driven by sketchccl-soak): the run's calls, every one
// checked, one line each for the driver to compare across ranks.
//
//   sketchccl-soak-worker RUN_SEED RANK NRANKS ID_HEX CALLS LOSSY KILL_CALL
//
// LOSSY (0/1): the run's codec may change float sums (so those are compared across ranks only);
// KILL_CALL: this rank kills itself (SIGKILL) a few milliseconds into that call (-1: never; 0:
// during ncclCommInitRank). Lines:
//   CALL <i> <kind> <type> <op> <count> <rc> <hash|-> <OK|BAD why>
//   FAILED <i> <rc> <seconds since the start> <last error>   (the communicator is unusable)
//   DONE <seconds>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/all_types.h"
#include "tests/api/elem_convert.h"
#include "tests/api/rank_report.h"
#include "tests/soak/soak_plan.h"

namespace {

using namespace sketchccl::soak;
using sketchccl::testing::any_load;
using sketchccl::testing::fnv1a;

int g_rank = 0, g_nranks = 1;
bool g_lossy = false;
std::chrono::steady_clock::time_point g_start;

double since_start() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
}

// Not all_types.h's any_store: the soak's integer results must wrap, not convert.
void store(ncclDataType_t t, void* buf, size_t i, double v) {
  auto* b = static_cast<uint8_t*>(buf);
  // Integers wrap as the type's own arithmetic does (an 8-bit product of 256 is 0).
  const auto w = static_cast<uint64_t>(static_cast<int64_t>(v));
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      b[i] = static_cast<uint8_t>(w);
      break;
    case ncclInt32:
    case ncclUint32:
      reinterpret_cast<uint32_t*>(b)[i] = static_cast<uint32_t>(w);
      break;
    case ncclInt64:
    case ncclUint64:
      reinterpret_cast<uint64_t*>(b)[i] = w;
      break;
    case ncclFloat16:
      reinterpret_cast<uint16_t*>(b)[i] = sketchccl::testing::to_half(static_cast<float>(v));
      break;
    case ncclBfloat16:
      reinterpret_cast<uint16_t*>(b)[i] = sketchccl::testing::to_bf16(static_cast<float>(v));
      break;
    case ncclFloat32:
      reinterpret_cast<float*>(b)[i] = static_cast<float>(v);
      break;
    default:
      reinterpret_cast<double*>(b)[i] = v;
      break;
  }
}

// The exact reduction of element i over `members` (old ranks), as stored in type t (integers
// wrap as the type's arithmetic does).
double reference(const Call& c, const std::vector<int>& members, size_t i) {
  double acc = c.op == ncclProd ? 1 : c.op == ncclMax ? -1e300 : c.op == ncclMin ? 1e300 : 0;
  for (int r : members) {
    const double v = input(c, c.type, c.op, r, i);
    if (c.op == ncclSum || c.op == ncclAvg) acc += v;
    if (c.op == ncclProd) acc *= v;
    if (c.op == ncclMax) acc = std::max(acc, v);
    if (c.op == ncclMin) acc = std::min(acc, v);
  }
  if (c.op == ncclAvg) acc /= static_cast<double>(members.size());
  uint8_t tmp[8];
  if (c.op == ncclAvg && !is_float(c.type)) acc = std::trunc(acc);
  store(c.type, tmp, 0, acc);
  return any_load(c.type, tmp, 0);
}

// Whether the run's codec may take this reduction over (and change its values).
bool lossy(const Call& c) {
  return g_lossy && (c.type == ncclFloat32 || c.type == ncclFloat16 || c.type == ncclBfloat16) &&
         (c.op == ncclSum || c.op == ncclAvg);
}

// "" when out[i] (element first + i of the reduction) matches the reference for every i.
std::string check_reduced(const Call& c, const std::vector<int>& members, const void* out,
                          size_t first, size_t n) {
  const bool loose = lossy(c);
  for (size_t i = 0; i < n; ++i) {
    const double y = any_load(c.type, out, i);
    if (!std::isfinite(y)) return "non-finite at " + std::to_string(first + i);
    if (loose) continue;
    const double want = reference(c, members, first + i);
    const double tol = c.op != ncclAvg ? 0 : is_float(c.type) ? 1e-2 * std::fabs(want) + 1e-3 : 1;
    if (std::fabs(y - want) > tol) {
      char why[128];
      std::snprintf(why, sizeof why, "element %zu is %.9g, exact %.9g", first + i, y, want);
      return why;
    }
  }
  return "";
}

// "" when out holds rank `src`'s inputs [0, n) (AllGather, Broadcast: copies, always exact).
std::string check_copy(const Call& c, int src, const void* out, size_t n, size_t at) {
  for (size_t i = 0; i < n; ++i) {
    const double y = any_load(c.type, out, at + i);
    uint8_t tmp[8];
    store(c.type, tmp, 0, input(c, c.type, c.op, src, i));
    if (y != any_load(c.type, tmp, 0)) {
      return "element " + std::to_string(at + i) + " is not rank " + std::to_string(src) + "'s";
    }
  }
  return "";
}

void fill(const Call& c, int r, void* buf, size_t n) {
  for (size_t i = 0; i < n; ++i)
    store(c.type, buf, i, input(c, c.type, c.op, r, i));
}

struct Outcome {
  ncclResult_t rc = ncclSuccess;
  std::string hash = "-";  // of a result every rank holds alike
  std::string bad;         // why the result is wrong
};

std::string hex(const void* p, size_t n) {
  char h[24];
  std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(fnv1a(p, n)));
  return h;
}

std::vector<int> all_ranks(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = i;
  return v;
}

Outcome run_one(const Call& c, ncclComm_t comm, int rank, const std::vector<int>& members,
                bool compare_hash) {
  Outcome o;
  const size_t es = type_bytes(c.type), n = c.count, p = members.size();
  const int me = members[static_cast<size_t>(rank)];
  std::vector<uint8_t> send, recv;
  switch (c.kind) {
    case Kind::kAllReduce:
    case Kind::kGroup: {
      send.resize(n * es + 1);
      recv.resize(n * es + 1);
      fill(c, me, send.data(), n);
      void* out = c.in_place ? send.data() : recv.data();
      o.rc = ncclAllReduce(send.data(), out, n, c.type, c.op, comm, nullptr);
      if (o.rc == ncclSuccess) {
        o.bad = check_reduced(c, members, out, 0, n);
        if (compare_hash) o.hash = hex(out, n * es);
      }
      break;
    }
    case Kind::kReduceScatter: {
      send.resize(p * n * es + 1);
      recv.resize(n * es + 1);
      fill(c, me, send.data(), p * n);
      void* out = c.in_place ? send.data() + static_cast<size_t>(rank) * n * es : recv.data();
      o.rc = ncclReduceScatter(send.data(), out, n, c.type, c.op, comm, nullptr);
      if (o.rc == ncclSuccess) {
        o.bad = check_reduced(c, members, out, static_cast<size_t>(rank) * n, n);
      }
      break;
    }
    case Kind::kAllGather: {
      send.resize(n * es + 1);
      recv.resize(p * n * es + 1);
      void* in = c.in_place ? recv.data() + static_cast<size_t>(rank) * n * es : send.data();
      fill(c, me, in, n);
      o.rc = ncclAllGather(in, recv.data(), n, c.type, comm, nullptr);
      if (o.rc == ncclSuccess) {
        for (size_t r = 0; r < p && o.bad.empty(); ++r)
          o.bad = check_copy(c, members[r], recv.data(), n, r * n);
        if (compare_hash) o.hash = hex(recv.data(), p * n * es);
      }
      break;
    }
    case Kind::kBroadcast: {
      send.resize(n * es + 1);
      recv.resize(n * es + 1);
      fill(c, me, send.data(), n);
      void* out = c.in_place ? send.data() : recv.data();
      o.rc = ncclBroadcast(send.data(), out, n, c.type, c.root, comm, nullptr);
      if (o.rc == ncclSuccess) {
        o.bad = check_copy(c, members[static_cast<size_t>(c.root)], out, n, 0);
        if (compare_hash) o.hash = hex(out, n * es);
      }
      break;
    }
    case Kind::kReduce: {
      send.resize(n * es + 1);
      recv.resize(n * es + 1);
      fill(c, me, send.data(), n);
      void* out = c.in_place ? send.data() : recv.data();
      o.rc = ncclReduce(send.data(), out, n, c.type, c.op, c.root, comm, nullptr);
      if (o.rc == ncclSuccess && rank == c.root) o.bad = check_reduced(c, members, out, 0, n);
      break;
    }
    case Kind::kSplit:
      break;
  }
  return o;
}

// A group of AllReduces on distinct buffers: the group's result is the first error, else each
// call's check.
Outcome run_group(const Call& c, ncclComm_t comm) {
  Outcome o;
  std::vector<Call> calls;
  std::vector<std::vector<uint8_t>> bufs;
  Rng rng(c.data);
  for (int g = 0; g < c.group_size; ++g) {
    Call k = c;
    k.kind = Kind::kAllReduce;
    k.data = rng.next();
    k.count = c.count / static_cast<size_t>(c.group_size) + static_cast<size_t>(g);
    k.in_place = true;
    calls.push_back(k);
    bufs.emplace_back(k.count * type_bytes(k.type) + 1);
    fill(k, g_rank, bufs.back().data(), k.count);
  }
  ncclResult_t first = ncclGroupStart();
  for (size_t g = 0; g < calls.size() && first == ncclSuccess; ++g) {
    first =
        ncclAllReduce(bufs[g].data(), bufs[g].data(), calls[g].count, c.type, c.op, comm, nullptr);
  }
  ncclResult_t end = ncclGroupEnd();
  o.rc = first != ncclSuccess ? first : end;
  if (o.rc != ncclSuccess) return o;
  const std::vector<int> members = all_ranks(g_nranks);
  uint64_t h = 0;
  for (size_t g = 0; g < calls.size() && o.bad.empty(); ++g) {
    o.bad = check_reduced(calls[g], members, bufs[g].data(), 0, calls[g].count);
    h = h * 31 + fnv1a(bufs[g].data(), calls[g].count * type_bytes(c.type));
  }
  o.hash = hex(&h, sizeof h);
  return o;
}

// ncclCommSplit, then two calls on the child and its destruction; the outcome is the split's and
// the child calls' first error (the child's results differ by color: no hash).
Outcome run_split(const Call& c, ncclComm_t comm) {
  Outcome o;
  const int color = split_color(c, g_rank, g_nranks);
  ncclComm_t child = nullptr;
  o.rc = ncclCommSplit(comm, color, split_key(c, g_rank), &child, nullptr);
  if (o.rc != ncclSuccess || color == NCCL_SPLIT_NOCOLOR) {
    if (o.rc == ncclSuccess && child != nullptr) o.bad = "a child for NCCL_SPLIT_NOCOLOR";
    return o;
  }
  // The expected members, ordered by (key, old rank) as NCCL orders them.
  std::vector<int> members;
  for (int r = 0; r < g_nranks; ++r) {
    if (split_color(c, r, g_nranks) == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&c](int a, int b) { return split_key(c, a) < split_key(c, b); });
  const int want =
      static_cast<int>(std::find(members.begin(), members.end(), g_rank) - members.begin());
  int got = -1, size = -1;
  if (child == nullptr || ncclCommUserRank(child, &got) != ncclSuccess ||
      ncclCommCount(child, &size) != ncclSuccess || got != want ||
      size != static_cast<int>(members.size())) {
    o.bad = "child rank " + std::to_string(got) + " of " + std::to_string(size) + ", expected " +
            std::to_string(want) + " of " + std::to_string(members.size());
  }
  Rng rng(c.data);
  for (int k = 0; k < 2 && o.rc == ncclSuccess && o.bad.empty(); ++k) {
    Call a = c;
    a.kind = Kind::kAllReduce;
    a.type = ncclFloat32;
    a.op = ncclSum;
    a.data = rng.next();
    a.count = c.count / 4;
    Outcome r = run_one(a, child, want, members, false);
    o.rc = r.rc;
    o.bad = r.bad;
  }
  if (child != nullptr) {
    ncclResult_t d = ncclCommDestroy(child);
    if (o.rc == ncclSuccess) o.rc = d;
  }
  return o;
}

bool fatal(ncclResult_t rc) {
  return rc != ncclSuccess && rc != ncclInvalidArgument && rc != ncclInvalidUsage;
}

// Kills this process `after_ms` from now, wherever it is then (inside a call, most likely).
void kill_soon(uint64_t after_ms) {
  std::thread([after_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
    raise(SIGKILL);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s RUN_SEED RANK NRANKS ID_HEX CALLS LOSSY KILL_CALL\n", argv[0]);
    return 2;
  }
  g_start = std::chrono::steady_clock::now();
  const uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  g_rank = std::atoi(argv[2]);
  g_nranks = std::atoi(argv[3]);
  ncclUniqueId id{};
  if (!sketchccl::testing::parse_id_hex(argv[4], &id)) return 2;
  const int calls = std::atoi(argv[5]);
  g_lossy = std::atoi(argv[6]) != 0;
  const int kill_call = std::atoi(argv[7]);
  Rng kill_rng(mix(seed, 0x6b696c6c));
  if (kill_call == 0) kill_soon(kill_rng.below(200));
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRank(&comm, g_nranks, id, g_rank);
  if (rc != ncclSuccess) {
    std::printf("FAILED 0 %d %.3f %s\n", static_cast<int>(rc), since_start(),
                ncclGetLastError(nullptr));
    return 0;
  }
  Rng rng(seed);
  const std::vector<int> members = all_ranks(g_nranks);
  for (int i = 1; i <= calls; ++i) {
    const Call c = next_call(rng, g_nranks);
    if (i == kill_call) kill_soon(kill_rng.below(30));
    Outcome o = c.kind == Kind::kGroup   ? run_group(c, comm)
                : c.kind == Kind::kSplit ? run_split(c, comm)
                                         : run_one(c, comm, g_rank, members, true);
    std::printf("CALL %d %s %d %d %zu %d %s %s\n", i, kind_name(c.kind), static_cast<int>(c.type),
                static_cast<int>(c.op), c.count, static_cast<int>(o.rc), o.hash.c_str(),
                o.bad.empty() ? "OK" : ("BAD " + o.bad).c_str());
    std::fflush(stdout);
    if (fatal(o.rc)) {
      std::printf("FAILED %d %d %.3f %s\n", i, static_cast<int>(o.rc), since_start(),
                  ncclGetLastError(comm));
      std::fflush(stdout);
      ncclCommAbort(comm);
      return 0;
    }
  }
  rc = ncclCommDestroy(comm);
  std::printf("DONE %.3f %d\n", since_start(), static_cast<int>(rc));
  return 0;
}
