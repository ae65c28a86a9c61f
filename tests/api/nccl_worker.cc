// One rank of a multi-process test, using only nccl.h (linked against libsketchccl.so,
// standalone). The driver (allreduce_test.cc) starts P of these and compares what they print.
//
//   nccl_worker SCENARIO RANK NRANKS ID_HEX [ARGS...]   (the scenarios: main's table)
//   nccl_worker group NRANKS                          (one thread drives every rank)
//
// Every check prints one line "CASE <name> HASH <fnv1a of the output bytes> <OK|FAIL why>";
// the driver requires OK everywhere and the same HASH on every rank for a case.
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sketchccl/sketchccl.h>

#include "tests/api/elem_convert.h"
#include "tests/api/rank_report.h"
#include "tests/api/worker_main.h"
#include "tests/api/worker_reductions.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::input_value;
using sketchccl::testing::load;
using sketchccl::testing::parse_id_hex;
using sketchccl::testing::report_case;
using sketchccl::testing::store;
using sketchccl::testing::type_name;
using sketchccl::testing::type_size;

int g_rank = 0, g_nranks = 1;

struct Check {
  double nmse = 0;        // ||y - exact||^2 / ||exact||^2
  double exact_frac = 1;  // fraction of positions equal to the exact result
  bool finite = true;
};

// The exact sum of every rank's input, computed once per (data, count).
const std::vector<double>& exact_sums(const std::string& data, size_t count) {
  static std::string cached_data;
  static std::vector<double> sums;
  if (cached_data != data || sums.size() != count) {
    sums.assign(count, 0.0);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < g_nranks; ++r)
        sums[i] += input_value(data, r, i);
    }
    cached_data = data;
  }
  return sums;
}

// Compares a rank's output with the exact reduction (computed from every rank's inputs).
Check check(const std::string& data, ncclDataType_t t, ncclRedOp_t op, const void* out,
            size_t count) {
  Check c;
  const std::vector<double>& sums = exact_sums(data, count);
  double err = 0, ref = 0;
  size_t exact = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = op == ncclAvg ? sums[i] / g_nranks : sums[i];
    double y = load(t, out, i);
    if (!std::isfinite(y)) c.finite = false;
    if (y == static_cast<double>(static_cast<float>(sum)) || std::fabs(y - sum) < 1e-6) exact++;
    err += (y - sum) * (y - sum);
    ref += sum * sum;
  }
  c.nmse = ref > 0 ? err / ref : err;
  c.exact_frac = count ? static_cast<double>(exact) / count : 1.0;
  return c;
}

// The codec's bound, plus the output type's own rounding (fp16/bf16).
double nmse_bound(const std::string& codec, ncclDataType_t t) {
  double b = sketchccl::testing::codec_nmse_bound(codec);
  if (t != ncclFloat32) b += 2e-5;  // the output's own rounding (fp16/bf16)
  return b;
}

// The allreduce matrix: counts x types x ops x in/out-of-place, `calls` times each. Small
// counts run every combination; large ones a covering subset (each type, op and placement).
int scenario_matrix(ncclComm_t comm, const std::string& codec, const std::string& data,
                    const std::vector<size_t>& counts, int calls) {
  struct Combo {
    ncclDataType_t t;
    ncclRedOp_t op;
    int inplace;
  };
  std::vector<Combo> all, large = {{ncclFloat32, ncclSum, 1},
                                   {ncclFloat32, ncclAvg, 0},
                                   {ncclFloat16, ncclSum, 0},
                                   {ncclBfloat16, ncclAvg, 1}};
  for (ncclDataType_t t : {ncclFloat32, ncclFloat16, ncclBfloat16}) {
    for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
      for (int inplace = 0; inplace < 2; ++inplace)
        all.push_back({t, op, inplace});
    }
  }
  for (size_t count : counts) {
    for (const Combo& cb : count > 4096 ? large : all) {
      const ncclDataType_t t = cb.t;
      const ncclRedOp_t op = cb.op;
      const int inplace = cb.inplace;
      const size_t bytes = count * type_size(t);
      std::vector<uint8_t> send(bytes + 1), recv(bytes + 1);
      for (int call = 0; call < calls; ++call) {
        for (size_t i = 0; i < count; ++i)
          store(t, send.data(), i, input_value(data, g_rank, i));
        void* out = inplace ? send.data() : recv.data();
        NCCL_OK(ncclAllReduce(send.data(), out, count, t, op, comm, nullptr));
        Check c = check(data, t, op, out, count);
        double bound = nmse_bound(codec, t);
        if (op == ncclAvg && (codec == "none" || codec == "sparse")) {
          // Exact sums; only the division and the output type round.
          bound = t == ncclFloat32 ? 1e-12 : t == ncclFloat16 ? 1e-6 : 2e-5;
        }
        std::string verdict = "OK";
        char why[160];
        if (!c.finite) {
          verdict = "FAIL non-finite output";
        } else if (c.nmse > bound) {
          std::snprintf(why, sizeof why, "FAIL nmse %.3g > bound %.3g", c.nmse, bound);
          verdict = why;
        }
        std::snprintf(why, sizeof why, "%s/n=%zu/%s/%s/%s/call%d", codec.c_str(), count,
                      type_name(t), op == ncclSum ? "sum" : "avg",
                      inplace ? "inplace" : "outofplace", call);
        report_case(why, out, bytes, verdict);
      }
    }
  }
  return 0;
}

// s2 on sparse data: after the first call the budget follows the support; nearly every position
// must be recovered exactly.
int scenario_s2(ncclComm_t comm, size_t count, int calls, bool check_first = true) {
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i)
    send[i] = input_value("sparse", g_rank, i);
  for (int call = 0; call < calls; ++call) {
    NCCL_OK(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr));
    Check c = check("sparse", ncclFloat32, ncclSum, recv.data(), count);
    char name[64], verdict[96] = "OK";
    if ((call > 0 || check_first) && c.exact_frac < 0.99)
      std::snprintf(verdict, sizeof verdict, "FAIL exact fraction %.4f", c.exact_frac);
    std::snprintf(name, sizeof name, "s2-peel/n=%zu/call%d", count, call);
    report_case(name, recv.data(), count * 4, verdict);
  }
  return 0;
}

// Rank r's embedding-style gradient of call `call`: 1% of the rows of 64, half of them drawn from
// rows every rank draws from (the supports partly overlap), new rows every call.
void embedding_gradient(int r, int call, std::vector<float>* x) {
  const size_t rows = x->size() / 64, mine = rows / 100;
  std::fill(x->begin(), x->end(), 0.0f);
  std::mt19937_64 shared(100 + call), own(200 + 17 * call + r);
  std::uniform_int_distribution<size_t> row(0, rows - 1);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<size_t> pool(mine);
  for (size_t& v : pool)
    v = row(shared);
  for (size_t k = 0; k < mine; ++k) {
    const size_t w = k % 2 == 0 ? pool[(k + static_cast<size_t>(r) * 31) % mine] : row(own);
    for (size_t j = 0; j < 64; ++j)
      (*x)[w * 64 + j] = val(own);
  }
}

// s2 on clustered (embedding-style) support, whose per-slice counts vary: three calls on one buffer
// (the last in place), each output element the exact sum up to fp32 summation order, the same bytes
// on every rank.
int scenario_s2_clustered(ncclComm_t comm, size_t count) {
  std::vector<float> buf(count), recv(count);
  std::vector<std::vector<float>> all(static_cast<size_t>(g_nranks), std::vector<float>(count));
  for (int call = 0; call < 3; ++call) {
    for (int r = 0; r < g_nranks; ++r)
      embedding_gradient(r, call, &all[static_cast<size_t>(r)]);
    buf = all[static_cast<size_t>(g_rank)];
    float* out = call == 2 ? buf.data() : recv.data();
    NCCL_OK(ncclAllReduce(buf.data(), out, count, ncclFloat32, ncclSum, comm, nullptr));
    size_t off = 0;
    double err = 0, ref = 0;
    for (size_t i = 0; i < count; ++i) {
      double s = 0, mag = 0;
      for (const auto& x : all) {
        s += x[i];
        mag += std::fabs(x[i]);
      }
      const double d = std::fabs(static_cast<double>(out[i]) - s);
      err += d * d;
      ref += s * s;
      if (d > 4e-7 * g_nranks * mag) off++;
    }
    char name[64], verdict[128] = "OK";
    if (off > 0) {
      std::snprintf(verdict, sizeof verdict, "FAIL %zu elements off, NMSE %.3g", off,
                    ref > 0 ? err / ref : err);
    }
    std::snprintf(name, sizeof name, "s2-clustered/n=%zu/call%d", count, call);
    report_case(name, out, count * 4, verdict);
  }
  return 0;
}

// Bad input: each must fail with the right code, and the communicator must stay usable.
int scenario_bad_input(ncclComm_t comm) {
  float buf[16] = {0};
  auto expect = [&](const char* name, ncclResult_t got, ncclResult_t want) {
    std::string v = got == want ? "OK" : std::string("FAIL got ") + ncclGetErrorString(got);
    report_case(name, &want, sizeof want, v);
  };
  expect("null-send", ncclAllReduce(nullptr, buf, 16, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("null-recv", ncclAllReduce(buf, nullptr, 16, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  // Every ncclDataType_t and op runs (exact: collectives_test.cc); others are NCCL's errors.
  expect("bad-type",
         ncclAllReduce(buf, buf, 16, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm,
                       nullptr),
         ncclInvalidArgument);
  expect("bad-op",
         ncclAllReduce(buf, buf, 16, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 3), comm,
                       nullptr),
         ncclInvalidArgument);
  expect(
      "misaligned",
      ncclAllReduce(reinterpret_cast<char*>(buf) + 1, buf, 4, ncclFloat32, ncclSum, comm, nullptr),
      ncclInvalidArgument);
  expect("overlap", ncclAllReduce(buf, buf + 1, 8, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("null-comm", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, nullptr, nullptr),
         ncclInvalidArgument);
  const char* last = ncclGetLastError(nullptr);
  expect("last-error-text", std::strstr(last, "comm") ? ncclSuccess : ncclInternalError,
         ncclSuccess);
  // Still usable.
  for (int i = 0; i < 16; ++i)
    buf[i] = static_cast<float>(g_rank + 1);
  NCCL_OK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, nullptr));
  float want = static_cast<float>(g_nranks * (g_nranks + 1) / 2);
  report_case("usable-after-bad-input", buf, sizeof buf, buf[0] == want ? "OK" : "FAIL wrong sum");
  return 0;
}

// One large call (64 Mi elements and up), exact data.
int scenario_big(ncclComm_t comm, const std::string& codec, size_t count) {
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i)
    buf[i] = input_value("int", g_rank, i);
  NCCL_OK(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat32, ncclSum, comm, nullptr));
  Check c = check("int", ncclFloat32, ncclSum, buf.data(), count);
  char name[64];
  std::snprintf(name, sizeof name, "big/%s/n=%zu", codec.c_str(), count);
  report_case(name, buf.data(), count * 4,
              c.nmse <= nmse_bound(codec, ncclFloat32) ? "OK" : "FAIL nmse");
  return 0;
}

// auto's figures and verdict: two AllReduces of `count` Gaussian values (the first runs `sparse`,
// which measures the support), then the statistics. Every rank must hold the same agreed link
// figures and have run the same codecs, whatever each measured or was told.
int scenario_network(ncclComm_t comm, size_t count) {
  std::vector<float> buf(count);
  for (int call = 0; call < 2; ++call) {
    for (size_t i = 0; i < count; ++i)
      buf[i] = input_value("gauss", g_rank, i + static_cast<size_t>(call));
    NCCL_OK(ncclAllReduce(buf.data(), buf.data(), count, ncclFloat32, ncclSum, comm, nullptr));
  }
  sketchcclCommStats st;
  std::memset(&st, 0, sizeof st);
  st.size = sizeof st;
  NCCL_OK(static_cast<ncclResult_t>(sketchcclCommGetStats(comm, &st)));
  std::string codecs;
  for (int i = 0; i < st.num_codecs; ++i)
    codecs += std::string(st.codecs[i].name) + ":" + std::to_string(st.codecs[i].calls) + " ";
  std::printf("NETWORK rank %d link_gbps %.9g latency_us %.9g exact_no_gain %llu codecs %s\n",
              g_rank, st.link_gbps, st.link_latency_us,
              static_cast<unsigned long long>(st.calls_exact_no_gain), codecs.c_str());
  const double figures[2] = {st.link_gbps, st.link_latency_us};
  report_case("network/agreed-figures", figures, sizeof figures,
              st.link_gbps > 0 ? "OK" : "FAIL no link figures");
  report_case("network/codecs", codecs.data(), codecs.size(),
              st.calls_taken == 2 ? "OK" : "FAIL calls not taken");
  return 0;
}

// A second communicator on another id, used alternately with the first.
int scenario_two_comms(ncclComm_t comm, const char* id2_hex) {
  ncclUniqueId id2;
  if (!parse_id_hex(id2_hex, &id2)) {
    report_case("two-comms/second-id", nullptr, 0, "FAIL bad second id");
    return 0;
  }
  ncclComm_t comm2 = nullptr;
  NCCL_OK(ncclCommInitRank(&comm2, g_nranks, id2, g_rank));
  const size_t n = 300000;
  std::vector<float> a(n), b(n);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < n; ++i) {
      a[i] = input_value("int", g_rank, i);
      b[i] = input_value("int", g_rank, i + 7);
    }
    NCCL_OK(ncclAllReduce(a.data(), a.data(), n, ncclFloat32, ncclSum, comm, nullptr));
    NCCL_OK(ncclAllReduce(b.data(), b.data(), n, ncclFloat32, ncclSum, comm2, nullptr));
    bool ok = check("int", ncclFloat32, ncclSum, a.data(), n).nmse < 1e-3;
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int r = 0; r < g_nranks; ++r)
        sum += input_value("int", r, i + 7);
      err += (b[i] - sum) * (b[i] - sum);
      ref += sum * sum;
    }
    ok = ok && err / ref < 1e-3;
    report_case("two-comms/round" + std::to_string(round), a.data(), n * 4, ok ? "OK" : "FAIL");
  }
  NCCL_OK(ncclCommDestroy(comm2));
  return 0;
}

// Split by parity; each half reduces on its own.
int scenario_split(ncclComm_t comm) {
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(comm, g_rank % 2, g_rank, &sub, nullptr));
  int sub_rank = -1, sub_size = -1;
  NCCL_OK(ncclCommUserRank(sub, &sub_rank));
  NCCL_OK(ncclCommCount(sub, &sub_size));
  const int expect_size = (g_nranks + 1 - g_rank % 2) / 2;
  const size_t n = 100000;
  std::vector<float> v(n, static_cast<float>(g_rank));
  NCCL_OK(ncclAllReduce(v.data(), v.data(), n, ncclFloat32, ncclSum, sub, nullptr));
  float want = 0;
  for (int r = g_rank % 2; r < g_nranks; r += 2)
    want += static_cast<float>(r);
  bool ok = sub_size == expect_size && sub_rank == g_rank / 2;
  for (size_t i = 0; i < n && ok; ++i)
    ok = v[i] == want;
  report_case("split/color" + std::to_string(g_rank % 2), v.data(), n * 4, ok ? "OK" : "FAIL");
  // A NOCOLOR split returns no communicator.
  ncclComm_t none = reinterpret_cast<ncclComm_t>(0x1);
  NCCL_OK(ncclCommSplit(comm, g_rank == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none, nullptr));
  bool nocolor_ok = g_rank == 0 ? none == nullptr : none != nullptr;
  report_case("split/nocolor", &nocolor_ok, 0, nocolor_ok ? "OK" : "FAIL");
  if (none != nullptr) NCCL_OK(ncclCommDestroy(none));
  NCCL_OK(ncclCommDestroy(sub));
  return 0;
}

// One process, one thread, NRANKS ranks: ncclCommInitAll, then grouped AllReduces.
int scenario_group_single_thread(int nranks) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(nranks));
  NCCL_OK(ncclCommInitAll(comms.data(), nranks, nullptr));
  const size_t n = 500003;
  std::vector<std::vector<float>> bufs(static_cast<size_t>(nranks), std::vector<float>(n));
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < n; ++i)
      bufs[static_cast<size_t>(r)][i] = input_value("int", r, i);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    auto& b = bufs[static_cast<size_t>(r)];
    NCCL_OK(ncclAllReduce(b.data(), b.data(), n, ncclFloat32, ncclSum,
                          comms[static_cast<size_t>(r)], nullptr));
  }
  NCCL_OK(ncclGroupEnd());
  g_nranks = nranks;
  bool same = true;
  for (int r = 1; r < nranks; ++r)
    same = same && bufs[static_cast<size_t>(r)] == bufs[0];
  Check c = check("int", ncclFloat32, ncclSum, bufs[0].data(), n);
  report_case("group-one-thread", bufs[0].data(), n * 4,
              same && c.nmse < 1e-3 ? "OK" : "FAIL results differ or wrong");
  for (ncclComm_t c2 : comms)
    NCCL_OK(ncclCommDestroy(c2));
  return 0;
}

// The same input K times on one buffer: prints the NMSE of the mean of the K outputs. With
// error feedback the compression error cancels across calls (O(1/K)); without, it only
// averages out (O(1/sqrt K)).
int scenario_error_feedback(ncclComm_t comm, size_t count, int k) {
  std::vector<float> send(count), recv(count);
  std::vector<double> mean(count, 0.0);
  for (size_t i = 0; i < count; ++i)
    send[i] = input_value("gauss", g_rank, i);
  for (int call = 0; call < k; ++call) {
    NCCL_OK(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i)
      mean[i] += recv[i] / k;
  }
  const std::vector<double>& sums = exact_sums("gauss", count);
  double err = 0, ref = 0;
  for (size_t i = 0; i < count; ++i) {
    err += (mean[i] - sums[i]) * (mean[i] - sums[i]);
    ref += sums[i] * sums[i];
  }
  std::printf("EF_MEAN_NMSE %.6g\n", err / ref);
  report_case("ef-mean", recv.data(), count * 4, "OK");
  return 0;
}

// ncclCommInitRankConfig with blocking = 0: ncclInProgress, then poll ncclCommGetAsyncError.
int scenario_nonblocking(const ncclUniqueId& id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, g_nranks, id, g_rank, &config);
  report_case("nonblocking-init-returns", &r, 0,
              r == ncclInProgress || r == ncclSuccess ? "OK" : "FAIL unexpected result");
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 3000 && state == ncclInProgress; ++i) {
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  report_case("nonblocking-init-completes", &state, 0, state == ncclSuccess ? "OK" : "FAIL");
  std::vector<float> v(2000, 1.0f);
  NCCL_OK(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr));
  report_case("nonblocking-allreduce", v.data(), 8000,
              v[0] == static_cast<float>(g_nranks) ? "OK" : "FAIL");
  NCCL_OK(ncclCommDestroy(comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using sketchccl::testing::count_arg;
  using sketchccl::testing::kAllReduce;
  using sketchccl::testing::Ranks;
  using sketchccl::testing::WorkerArgs;
  const char* codec_env = std::getenv("SKETCHCCL_CODEC");
  const std::string codec = codec_env ? codec_env : "auto";
  const std::vector<sketchccl::testing::Scenario> scenarios = {
      {"group", 0, Ranks::kOneProcess,
       [](ncclComm_t, const WorkerArgs& wa) { return scenario_group_single_thread(wa.nranks); }},
      {"nonblocking", 0, Ranks::kOwnInit,
       [](ncclComm_t, const WorkerArgs& wa) { return scenario_nonblocking(wa.id); }},
      // matrix DATA COUNT...
      {"matrix", 1, Ranks::kCommunicator,
       [&codec](ncclComm_t comm, const WorkerArgs& wa) {
         std::vector<size_t> counts;
         for (size_t i = 1; i < wa.args.size(); ++i)
           counts.push_back(count_arg(wa, i));
         return scenario_matrix(comm, codec, wa.args[0], counts, 2);
       }},
      {"s2", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_s2(comm, count_arg(wa, 0), 3);
       }},
      {"s2clustered", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_s2_clustered(comm, count_arg(wa, 0));
       }},
      {"bad", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) { return scenario_bad_input(comm); }},
      {"mismatch", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) {
         return scenario_count_mismatch(kAllReduce, comm, g_rank, g_nranks);
       }},
      {"network", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_network(comm, count_arg(wa, 0));
       }},
      {"big", 1, Ranks::kCommunicator,
       [&codec](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_big(comm, codec, count_arg(wa, 0));
       }},
      // twocomms ID2_HEX
      {"twocomms", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_two_comms(comm, wa.args[0].c_str());
       }},
      // ef COUNT K
      {"ef", 2, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_error_feedback(comm, count_arg(wa, 0), std::atoi(wa.args[1].c_str()));
       }},
      // auto's first call has no history and runs the dense codec: only later calls are exact.
      {"s2auto", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_s2(comm, count_arg(wa, 0), 3, false);
       }},
      {"split", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) { return scenario_split(comm); }},
      {"kill", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_kill(kAllReduce, comm, count_arg(wa, 0), g_rank, g_nranks);
       }},
  };
  return sketchccl::testing::run_worker(argc, argv, scenarios, &g_rank, &g_nranks);
}
