// One rank of the compressed AllGather in standalone mode (allgather_test.cc), through the
// exported API only.
//
//   allgather_worker compressed|node-aware|exact|bad-codec RANK NRANKS ID_HEX
//
// compressed (SKETCHCCL_ALLGATHER_CODEC=q8): float32, bfloat16 and float16, apart and in place,
// the per-call codec and exact options, two in one group: every case's output hashed (the driver
// checks that every rank got the same bits), its NMSE against the exact gather and its bytes on
// the wire (the statistics) against the exact ring's (P - 1) · sendcount · element size.
// node-aware (q8, 2 interleaved nodes by NCCL_HOSTID): the same, its inter-node bytes against an
// exact exchange's (N - 1) shards.
// exact (unset): the exact gather, bit for bit, with no compressed call counted.
// bad-codec (SKETCHCCL_ALLGATHER_CODEC=s2): the communicator is refused, naming the variable.
//
// Prints "CASE <name> HASH <h> <OK|FAIL why>" lines (rank_report.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "include/sketchccl/sketchccl.h"
#include "src/api/coll_config.h"
#include "src/api/nccl_api.h"
#include "tests/api/config_option.h"
#include "tests/api/elem_convert.h"
#include "tests/api/rank_report.h"
#include "tests/api/worker_main.h"

namespace {

using sketchccl::testing::input_value;
using sketchccl::testing::report_case;
using sketchccl::testing::sketchccl_option;

int g_rank = 0, g_nranks = 1;
int g_nodes = 0;                      // node-aware: the nodes (NCCL_HOSTID); 0: one flat exchange
constexpr size_t kCount = 40000 + 7;  // per rank: several 64 KiB slices, a short last one

struct Totals {
  uint64_t calls = 0, sent = 0, in = 0, inter_node = 0;
};

Totals totals(ncclComm_t comm) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  Totals t;
  if (sketchcclCommGetStats(comm, &s) != 0) return t;
  t.calls = s.allgather_calls;
  t.sent = s.allgather_bytes_sent;
  t.in = s.allgather_bytes_in;
  t.inter_node = s.allgather_inter_node_bytes_sent;
  return t;
}

// Rank q's shard, element i, as the type stores it.
float shard_value(ncclDataType_t t, int q, size_t i) {
  const float v = input_value("gauss", q, i);
  std::vector<char> one(4);
  sketchccl::testing::store(t, one.data(), 0, v);
  return sketchccl::testing::load(t, one.data(), 0);
}

// One AllGather of kCount elements per rank of `t`; `config` may be null (the plain call).
// Checks: success, NMSE at most `max_nmse` against the exact gather, calls counted +`calls`, and
// bytes sent at most `max_wire` of the exact ring's.
void gather(const std::string& name, ncclComm_t comm, ncclDataType_t t, bool in_place,
            const ncclCollConfig_t* config, double max_nmse, uint64_t calls, double max_wire) {
  const size_t esz = sketchccl::testing::type_size(t);
  std::vector<char> recv(kCount * esz * static_cast<size_t>(g_nranks));
  std::vector<char> own(kCount * esz);
  char* send = in_place ? recv.data() + static_cast<size_t>(g_rank) * kCount * esz : own.data();
  for (size_t i = 0; i < kCount; ++i)
    sketchccl::testing::store(t, send, i, input_value("gauss", g_rank, i));
  const Totals before = totals(comm);
  const ncclResult_t r =
      config != nullptr ? ncclAllGatherConfig(send, recv.data(), kCount, t, comm, nullptr, config)
                        : ncclAllGather(send, recv.data(), kCount, t, comm, nullptr);
  const Totals after = totals(comm);
  double err = 0, ref = 0;
  for (int q = 0; q < g_nranks; ++q) {
    for (size_t i = 0; i < kCount; ++i) {
      const double exact = shard_value(t, q, i);
      const double got =
          sketchccl::testing::load(t, recv.data(), static_cast<size_t>(q) * kCount + i);
      err += (got - exact) * (got - exact);
      ref += exact * exact;
    }
  }
  const double nmse = ref > 0 ? err / ref : err;
  // Node-aware: what crosses nodes, against an exact exchange's (N - 1) shards to other nodes.
  const double exact_ring = double((g_nodes > 0 ? g_nodes : g_nranks) - 1) * double(kCount * esz);
  const double wire =
      double(g_nodes > 0 ? after.inter_node - before.inter_node : after.sent - before.sent) /
      exact_ring;
  // Node-aware: compressed bytes did cross nodes, and inside the node went (L - 1) · N shards.
  const uint64_t intra = (after.sent - before.sent) - (after.inter_node - before.inter_node);
  const uint64_t node_exact =
      g_nodes > 0 ? uint64_t(g_nranks / g_nodes - 1) * g_nodes * kCount * esz : 0;
  const bool node_aware_ok =
      g_nodes == 0 || calls == 0 || (after.inter_node > before.inter_node && intra == node_exact);
  const bool ok = r == ncclSuccess && nmse <= max_nmse && after.calls == before.calls + calls &&
                  wire <= max_wire && (calls == 0 || after.in - before.in == kCount * esz) &&
                  node_aware_ok;
  char why[256];
  std::snprintf(why, sizeof why,
                "FAIL result %d (%s) nmse %.3g wire/exact ring %.3f calls +%llu intra-node %llu", r,
                r == ncclSuccess ? "" : ncclGetLastError(comm), nmse, wire,
                static_cast<unsigned long long>(after.calls - before.calls),
                static_cast<unsigned long long>(intra));
  std::printf("INFO %s nmse %.3g wire/exact ring %.3f\n", name.c_str(), nmse, wire);
  report_case(name, recv.data(), recv.size(), ok ? "OK" : why);
}

void compressed(ncclComm_t comm) {
  gather("f32-q8", comm, ncclFloat32, false, nullptr, 5e-4, 1, 0.35);
  gather("f32-q8-in-place", comm, ncclFloat32, true, nullptr, 5e-4, 1, 0.35);
  // bf16 input: q8's error against the bf16 values, half the exact ring's bytes at most.
  gather("bf16-q8", comm, ncclBfloat16, false, nullptr, 5e-4, 1, 0.7);
  gather("f16-q8-in-place", comm, ncclFloat16, true, nullptr, 5e-4, 1, 0.7);
  ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
  ncclConfigExt_t codec = sketchccl_option(sketchccl::api::kOptionCodec);
  codec.val.s = "bf16";
  ncclCollConfig_t with_codec = config;
  with_codec.ext = &codec;
  gather("ext-codec-bf16", comm, ncclFloat32, false, &with_codec, 1e-5, 1, 0.51);
  ncclConfigExt_t exact = sketchccl_option(sketchccl::api::kOptionExact);
  exact.val.i = 1;
  ncclCollConfig_t with_exact = config;
  with_exact.ext = &exact;
  gather("ext-exact", comm, ncclFloat32, false, &with_exact, 0, 0, 0);
  // Two gathers in one group: launched at ncclGroupEnd, both compressed, both right.
  {
    std::vector<float> a(kCount), b(kCount / 2);
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = input_value("gauss", g_rank, i);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = input_value("gauss", g_rank, i);
    std::vector<float> ya(a.size() * g_nranks), yb(b.size() * g_nranks);
    const Totals before = totals(comm);
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess)
      r = ncclAllGather(a.data(), ya.data(), a.size(), ncclFloat32, comm, nullptr);
    const ncclResult_t r2 =
        ncclAllGather(b.data(), yb.data(), b.size(), ncclFloat32, comm, nullptr);
    const ncclResult_t end = ncclGroupEnd();
    const Totals after = totals(comm);
    double err = 0, ref = 0;
    for (int q = 0; q < g_nranks; ++q) {
      for (size_t i = 0; i < b.size(); ++i) {
        for (const auto* y : {&ya, &yb}) {
          const size_t n = y == &ya ? a.size() : b.size();
          const double d = (*y)[q * n + i] - input_value("gauss", q, i);
          err += d * d;
          ref += double(input_value("gauss", q, i)) * input_value("gauss", q, i);
        }
      }
    }
    const bool ok = r == ncclSuccess && r2 == ncclSuccess && end == ncclSuccess &&
                    after.calls == before.calls + 2 && err / ref <= 5e-4;
    std::vector<float> both(ya);
    both.insert(both.end(), yb.begin(), yb.end());
    report_case("grouped", both.data(), both.size() * sizeof(float),
                ok ? "OK"
                   : "FAIL results " + std::to_string(r) + " " + std::to_string(r2) + " " +
                         std::to_string(end) + " nmse " + std::to_string(err / ref));
  }
  // A codec that cannot gather (its packets need the other ranks' to decode): refused.
  codec.val.s = "s2";
  std::vector<float> buf(kCount * static_cast<size_t>(g_nranks));
  const ncclResult_t r =
      ncclAllGatherConfig(buf.data(), buf.data(), kCount, ncclFloat32, comm, nullptr, &with_codec);
  const std::string err = ncclGetLastError(comm);
  report_case("ext-codec-s2-refused", nullptr, 0,
              r == ncclInvalidArgument && err.find("'s2'") != std::string::npos
                  ? "OK"
                  : "FAIL result " + std::to_string(r) + " '" + err + "'");
}

// node-aware: 2 nodes, interleaved (rank r on node r % 2), read at the communicator's join.
int node_aware(const sketchccl::testing::WorkerArgs& wa) {
  g_nodes = 2;
  setenv("NCCL_HOSTID", g_rank % 2 == 0 ? "even" : "odd", 1);
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, wa.id, g_rank));
  gather("f32-q8-node-aware", comm, ncclFloat32, false, nullptr, 5e-4, 1, 0.35);
  gather("f32-q8-node-aware-in-place", comm, ncclFloat32, true, nullptr, 5e-4, 1, 0.35);
  ncclCommDestroy(comm);
  return 0;
}

// bad-codec: the communicator is refused, naming the variable.
int bad_codec(const sketchccl::testing::WorkerArgs& wa) {
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, g_nranks, wa.id, g_rank);
  const std::string err = ncclGetLastError(nullptr);
  report_case("bad-codec-refused", nullptr, 0,
              init != ncclSuccess && err.find("SKETCHCCL_ALLGATHER_CODEC") != std::string::npos
                  ? "OK"
                  : "FAIL result " + std::to_string(init) + " '" + err + "'");
  if (init == ncclSuccess) ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using sketchccl::testing::Ranks;
  using sketchccl::testing::WorkerArgs;
  const std::vector<sketchccl::testing::Scenario> scenarios = {
      {"compressed", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) {
         compressed(comm);
         return 0;
       }},
      {"node-aware", 0, Ranks::kOwnInit,
       [](ncclComm_t, const WorkerArgs& wa) { return node_aware(wa); }},
      {"exact", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) {
         gather("f32-exact", comm, ncclFloat32, false, nullptr, 0, 0, 0);
         gather("bf16-exact", comm, ncclBfloat16, true, nullptr, 0, 0, 0);
         return 0;
       }},
      {"bad-codec", 0, Ranks::kOwnInit,
       [](ncclComm_t, const WorkerArgs& wa) { return bad_codec(wa); }},
  };
  return sketchccl::testing::run_worker(argc, argv, scenarios, &g_rank, &g_nranks);
}
