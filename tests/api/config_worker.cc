// One rank of the nccl*Config collectives in standalone mode (config_calls_test.cc): each call is
// run as its plain call would be, AllReduce and ReduceScatter compressed and as accurate, with
// SketchCCL's per-call options (a codec, exact) from the config's `ext` list.
//
//   config_worker config RANK NRANKS ID_HEX
//
// Prints "CASE <name> HASH <h> <OK|FAIL why>" lines (the hash of what every rank must agree on).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "include/sketchccl/sketchccl.h"
#include "src/api/coll_config.h"
#include "src/api/nccl_api.h"
#include "tests/api/config_option.h"
#include "tests/api/rank_report.h"
#include "tests/api/worker_main.h"

namespace {

using sketchccl::testing::input_value;
using sketchccl::testing::report_case;
using sketchccl::testing::sketchccl_option;

int g_rank = 0, g_nranks = 1;
constexpr size_t kCount = (size_t(1) << 18) + 3;  // just above SKETCHCCL_MIN_BYTES (1 MiB)

struct Totals {
  uint64_t in = 0, sent = 0, codec_calls = 0;
};

// This communicator's bytes in and sent so far, and the calls of `codec`.
Totals totals(ncclComm_t comm, const char* codec) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  Totals t;
  if (sketchcclCommGetStats(comm, &s) != 0) return t;
  t.in = s.bytes_in;
  t.sent = s.bytes_sent;
  for (int i = 0; i < s.num_codecs; ++i) {
    if (std::strcmp(s.codecs[i].name, codec) == 0) t.codec_calls = s.codecs[i].calls;
  }
  return t;
}

double nmse(const std::vector<float>& y, size_t offset, size_t n) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int r = 0; r < g_nranks; ++r)
      exact += input_value("gauss", r, offset + i);
    err += (y[i] - exact) * (y[i] - exact);
    ref += exact * exact;
  }
  return ref > 0 ? err / ref : err;
}

std::vector<float> input(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = input_value("gauss", g_rank, i);
  return x;
}

// An AllReduce through `config`: its error below `max_nmse`; compressed (wire bytes per input
// byte below 3/4 of an uncompressed ring's 2(P-1)/P) or not, as `compressed` says; `codec` the
// codec whose calls it adds to.
void allreduce(const std::string& name, ncclComm_t comm, const ncclCollConfig_t* config,
               double max_nmse, bool compressed, const char* codec) {
  const std::vector<float> x = input(kCount);
  std::vector<float> y(kCount, 0.0f);
  const Totals before = totals(comm, codec);
  const ncclResult_t r =
      ncclAllReduceConfig(x.data(), y.data(), kCount, ncclFloat32, ncclSum, comm, nullptr, config);
  const Totals after = totals(comm, codec);
  const double e = nmse(y, 0, kCount);
  const double wire =
      after.in > before.in ? double(after.sent - before.sent) / double(after.in - before.in) : 1.0;
  char why[200];
  std::snprintf(why, sizeof why, "FAIL result %d nmse %.3g wire/input %.3f %s calls +%llu", r, e,
                wire, codec,
                static_cast<unsigned long long>(after.codec_calls - before.codec_calls));
  const double ring = 2.0 * (g_nranks - 1) / g_nranks;
  const bool ok = r == ncclSuccess && e <= max_nmse && (wire < 0.75 * ring) == compressed &&
                  after.codec_calls == before.codec_calls + 1;
  report_case(name, y.data(), y.size() * sizeof(float), ok ? "OK" : why);
}

int run(ncclComm_t comm) {
  allreduce("plain-config-null", comm, nullptr, 1e-3, true, "q8");
  ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
  allreduce("default-config", comm, &config, 1e-3, true, "q8");
  ncclCollConfig_t forced = config;
  forced.algSelection = "RING_SIMPLE";  // NCCL's own: nothing to pin without NCCL
  allreduce("nccl-settings-ignored", comm, &forced, 1e-3, true, "q8");
  ncclConfigExt_t codec = sketchccl_option(sketchccl::api::kOptionCodec);
  codec.val.s = "bf16";
  ncclCollConfig_t with_codec = config;
  with_codec.ext = &codec;
  allreduce("ext-codec-bf16", comm, &with_codec, 1e-4, true, "bf16");
  ncclConfigExt_t exact = sketchccl_option(sketchccl::api::kOptionExact);
  exact.val.i = 1;
  ncclCollConfig_t with_exact = config;
  with_exact.ext = &exact;
  allreduce("ext-exact", comm, &with_exact, 1e-12, false, "none");

  // Refused with the reason: an uninitialized config, an unknown codec.
  std::vector<float> buf(kCount);
  ncclCollConfig_t bad = config;
  bad.magic = 0;
  ncclResult_t r = ncclAllReduceConfig(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm,
                                       nullptr, &bad);
  std::string err = ncclGetLastError(comm);
  report_case(
      "uninitialized-refused", nullptr, 0,
      r == ncclInvalidArgument && err.find("NCCL_COLLCONFIG_INITIALIZER") != std::string::npos
          ? "OK"
          : "FAIL result " + std::to_string(r) + " '" + err + "'");
  codec.val.s = "q9";
  r = ncclAllReduceConfig(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, nullptr,
                          &with_codec);
  err = ncclGetLastError(comm);
  report_case("unknown-codec-refused", nullptr, 0,
              r == ncclInvalidArgument && err.find("q9") != std::string::npos
                  ? "OK"
                  : "FAIL result " + std::to_string(r) + " '" + err + "'");

  // ReduceScatter: this rank's chunk of the sum, compressed.
  const size_t recvcount = kCount / static_cast<size_t>(g_nranks);
  const std::vector<float> x = input(recvcount * g_nranks);
  std::vector<float> chunk(recvcount);
  const Totals before = totals(comm, "q8");
  r = ncclReduceScatterConfig(x.data(), chunk.data(), recvcount, ncclFloat32, ncclSum, comm,
                              nullptr, &config);
  const Totals after = totals(comm, "q8");
  const double e = nmse(chunk, recvcount * g_rank, recvcount);
  report_case("reduce-scatter", nullptr, 0,
              r == ncclSuccess && e <= 1e-3 && after.codec_calls == before.codec_calls + 1
                  ? "OK"
                  : "FAIL result " + std::to_string(r) + " nmse " + std::to_string(e));

  // The other *Config collectives: their plain calls, exact.
  std::vector<float> b = input(4096);
  r = ncclBroadcastConfig(b.data(), b.data(), b.size(), ncclFloat32, 0, comm, nullptr, &config);
  bool same = r == ncclSuccess;
  for (size_t i = 0; i < b.size() && same; ++i)
    same = b[i] == input_value("gauss", 0, i);
  report_case("broadcast-as-plain", b.data(), b.size() * sizeof(float),
              same ? "OK" : "FAIL result " + std::to_string(r));
  std::vector<float> gathered(4096 * static_cast<size_t>(g_nranks));
  const std::vector<float> mine = input(4096);
  r = ncclAllGatherConfig(mine.data(), gathered.data(), 4096, ncclFloat32, comm, nullptr, nullptr);
  same = r == ncclSuccess;
  for (int q = 0; q < g_nranks && same; ++q)
    same = gathered[4096 * q + 7] == input_value("gauss", q, 7);
  report_case("allgather-as-plain", gathered.data(), gathered.size() * sizeof(float),
              same ? "OK" : "FAIL result " + std::to_string(r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<sketchccl::testing::Scenario> scenarios = {
      {"config", 0, sketchccl::testing::Ranks::kCommunicator,
       [](ncclComm_t comm, const sketchccl::testing::WorkerArgs&) { return run(comm); }},
  };
  return sketchccl::testing::run_worker(argc, argv, scenarios, &g_rank, &g_nranks);
}
