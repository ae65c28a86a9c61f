// One rank of a multi-process ReduceScatter test, using only nccl.h (linked against
// libsketchccl.so, standalone). The driver (reduce_scatter_test.cc) starts P of these.
//
//   reduce_scatter_worker SCENARIO RANK NRANKS ID_HEX [ARGS...]
//   reduce_scatter_worker group NRANKS      (one thread drives every rank)
//
// Each rank holds a different chunk of the result, so a case's HASH is of its name only (the
// ranks agree on which cases ran); each rank checks its chunk against the exact reduction.
#include <nccl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/elem_convert.h"
#include "tests/api/rank_report.h"
#include "tests/api/worker_main.h"
#include "tests/api/worker_reductions.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::input_value;
using sketchccl::testing::load;
using sketchccl::testing::store;
using sketchccl::testing::type_name;
using sketchccl::testing::type_size;

int g_rank = 0, g_nranks = 1;

void report(const std::string& name, const std::string& verdict) {
  sketchccl::testing::report_case(name, name.data(), name.size(), verdict);
}

// This rank's chunk of the exact reduction: elements [rank · recvcount, (rank + 1) · recvcount).
std::vector<double> exact_chunk(const std::string& data, size_t recvcount, ncclRedOp_t op) {
  std::vector<double> want(recvcount, 0.0);
  const size_t first = static_cast<size_t>(g_rank) * recvcount;
  for (size_t i = 0; i < recvcount; ++i) {
    for (int r = 0; r < g_nranks; ++r)
      want[i] += input_value(data, r, first + i);
    if (op == ncclAvg) want[i] /= g_nranks;
  }
  return want;
}

// The mean square of the exact reduction over the whole input (every rank's chunk).
double exact_mean_square(const std::string& data, size_t recvcount, ncclRedOp_t op) {
  const size_t count = recvcount * static_cast<size_t>(g_nranks);
  double ref = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < g_nranks; ++r)
      sum += input_value(data, r, i);
    if (op == ncclAvg) sum /= g_nranks;
    ref += sum * sum;
  }
  return count > 0 ? ref / static_cast<double>(count) : 0;
}

// The chunk's mean squared error over the whole result's mean square: the AllReduce tests' NMSE,
// measured on this rank's chunk (a chunk of one element may hold a sum near zero).
double chunk_nmse(ncclDataType_t t, const void* out, const std::vector<double>& want,
                  double mean_square, bool* finite) {
  double err = 0;
  *finite = true;
  for (size_t i = 0; i < want.size(); ++i) {
    const double y = load(t, out, i);
    if (!std::isfinite(y)) *finite = false;
    err += (y - want[i]) * (y - want[i]);
  }
  if (want.empty()) return 0;
  err /= static_cast<double>(want.size());
  return mean_square > 0 ? err / mean_square : err;
}

double bound_for(const std::string& codec, ncclDataType_t t, ncclRedOp_t op) {
  if (codec == "none" || codec == "sparse") {
    // Exact sums; only the division and the output type round.
    if (op == ncclSum && t == ncclFloat32) return 0;
    return t == ncclFloat32 ? 1e-12 : t == ncclFloat16 ? 1e-6 : 2e-5;
  }
  double b = sketchccl::testing::codec_nmse_bound(codec);
  if (t != ncclFloat32) b += 2e-5;
  return b;
}

// Counts (per rank) x types x ops x in/out-of-place, twice each (the second call sees the
// buffer's history: auto's codec, error feedback). Every combination's buffers stay allocated to
// the end, so no address is reused: a buffer's history is keyed by its address, and the heaps of
// the ranks may reuse freed memory differently.
int scenario_matrix(ncclComm_t comm, const std::string& codec, const std::string& data,
                    const std::vector<size_t>& counts) {
  std::deque<std::vector<uint8_t>> keep;
  for (size_t recvcount : counts) {
    for (ncclDataType_t t : {ncclFloat32, ncclFloat16, ncclBfloat16}) {
      for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
        for (int inplace = 0; inplace < 2; ++inplace) {
          if (recvcount > 4096 && (t == ncclFloat16) != (op == ncclAvg)) continue;
          const size_t count = recvcount * static_cast<size_t>(g_nranks);
          const size_t esz = type_size(t);
          std::vector<uint8_t>& send = keep.emplace_back(count * esz + 1);
          std::vector<uint8_t>& recv = keep.emplace_back(recvcount * esz + 1);
          const std::vector<double> want = exact_chunk(data, recvcount, op);
          const double mean_square = exact_mean_square(data, recvcount, op);
          for (int call = 0; call < 2; ++call) {
            for (size_t i = 0; i < count; ++i)
              store(t, send.data(), i, input_value(data, g_rank, i));
            void* out =
                inplace ? send.data() + static_cast<size_t>(g_rank) * recvcount * esz : recv.data();
            NCCL_OK(ncclReduceScatter(send.data(), out, recvcount, t, op, comm, nullptr));
            bool finite = true;
            const double nmse = chunk_nmse(t, out, want, mean_square, &finite);
            const double bound = bound_for(codec, t, op);
            char why[160];
            std::string verdict = "OK";
            if (!finite) {
              verdict = "FAIL non-finite output";
            } else if (nmse > bound) {
              std::snprintf(why, sizeof why, "FAIL nmse %.3g > bound %.3g", nmse, bound);
              verdict = why;
            }
            std::snprintf(why, sizeof why, "rs/%s/n=%zu/%s/%s/%s/call%d", codec.c_str(), recvcount,
                          type_name(t), op == ncclSum ? "sum" : "avg",
                          inplace ? "inplace" : "outofplace", call);
            report(why, verdict);
          }
        }
      }
    }
  }
  return 0;
}

int scenario_bad_input(ncclComm_t comm) {
  std::vector<float> buf(16 * static_cast<size_t>(g_nranks), 0.0f);
  float* b = buf.data();
  auto expect = [&](const char* name, ncclResult_t got, ncclResult_t want) {
    report(name, got == want ? "OK" : std::string("FAIL got ") + ncclGetErrorString(got));
  };
  expect("rs-null-send", ncclReduceScatter(nullptr, b, 16, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("rs-null-recv", ncclReduceScatter(b, nullptr, 16, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  // Every ncclDataType_t and op runs (exact: collectives_test.cc); others are NCCL's errors.
  expect("rs-bad-type",
         ncclReduceScatter(b, b, 16, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm,
                           nullptr),
         ncclInvalidArgument);
  expect("rs-bad-op",
         ncclReduceScatter(b, b, 16, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 3), comm,
                           nullptr),
         ncclInvalidArgument);
  expect(
      "rs-misaligned",
      ncclReduceScatter(reinterpret_cast<char*>(b) + 1, b, 4, ncclFloat32, ncclSum, comm, nullptr),
      ncclInvalidArgument);
  // Inside the input but not this rank's chunk: NCCL forbids it.
  float* wrong = b + 16 * static_cast<size_t>(g_rank) + 1;
  expect("rs-overlap", ncclReduceScatter(b, wrong, 16, ncclFloat32, ncclSum, comm, nullptr),
         ncclInvalidArgument);
  expect("rs-null-comm", ncclReduceScatter(b, b, 16, ncclFloat32, ncclSum, nullptr, nullptr),
         ncclInvalidArgument);
  // Still usable, in place.
  for (float& v : buf)
    v = static_cast<float>(g_rank + 1);
  float* mine = b + 16 * static_cast<size_t>(g_rank);
  NCCL_OK(ncclReduceScatter(b, mine, 16, ncclFloat32, ncclSum, comm, nullptr));
  const float want = static_cast<float>(g_nranks * (g_nranks + 1) / 2);
  report("rs-usable-after-bad-input", mine[0] == want && mine[15] == want ? "OK" : "FAIL sum");
  return 0;
}

// The mean of k calls on one buffer against the exact sum (error feedback cancels the error of
// the mean); prints it for the driver.
int scenario_error_feedback(ncclComm_t comm, size_t recvcount, int k) {
  const size_t count = recvcount * static_cast<size_t>(g_nranks);
  std::vector<float> send(count), recv(recvcount);
  std::vector<double> mean(recvcount, 0.0);
  for (size_t i = 0; i < count; ++i)
    send[i] = input_value("gauss", g_rank, i);
  for (int call = 0; call < k; ++call) {
    NCCL_OK(ncclReduceScatter(send.data(), recv.data(), recvcount, ncclFloat32, ncclSum, comm,
                              nullptr));
    for (size_t i = 0; i < recvcount; ++i)
      mean[i] += recv[i] / k;
  }
  const std::vector<double> want = exact_chunk("gauss", recvcount, ncclSum);
  double err = 0, ref = 0;
  for (size_t i = 0; i < recvcount; ++i) {
    err += (mean[i] - want[i]) * (mean[i] - want[i]);
    ref += want[i] * want[i];
  }
  std::printf("EF_MEAN_NMSE %.6g\n", err / ref);
  report("rs-ef-mean", "OK");
  return 0;
}

// One float32 sum of `int` data (every sum exact): the statistics of exactly one call.
int scenario_once(ncclComm_t comm, size_t recvcount) {
  const size_t count = recvcount * static_cast<size_t>(g_nranks);
  std::vector<float> send(count), recv(recvcount);
  for (size_t i = 0; i < count; ++i)
    send[i] = input_value("int", g_rank, i);
  NCCL_OK(
      ncclReduceScatter(send.data(), recv.data(), recvcount, ncclFloat32, ncclSum, comm, nullptr));
  const std::vector<double> want = exact_chunk("int", recvcount, ncclSum);
  bool exact = true;
  for (size_t i = 0; i < recvcount; ++i)
    exact = exact && static_cast<double>(recv[i]) == want[i];
  report("rs-once-exact", exact ? "OK" : "FAIL not the exact sum");
  return 0;
}

// One thread drives every rank (ncclCommInitAll) inside a group: a ReduceScatter in place and an
// AllReduce per rank, completed at ncclGroupEnd; `int` data, so every sum is exact.
int scenario_group_single_thread(int nranks, const std::string& codec) {
  g_nranks = nranks;
  std::vector<ncclComm_t> comms(static_cast<size_t>(nranks));
  NCCL_OK(ncclCommInitAll(comms.data(), nranks, nullptr));
  const size_t recvcount = 100003, count = recvcount * static_cast<size_t>(nranks);
  std::vector<std::vector<float>> rs(static_cast<size_t>(nranks), std::vector<float>(count));
  std::vector<std::vector<float>> ar(static_cast<size_t>(nranks), std::vector<float>(1000));
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < count; ++i)
      rs[static_cast<size_t>(r)][i] = input_value("int", r, i);
    for (size_t i = 0; i < 1000; ++i)
      ar[static_cast<size_t>(r)][i] = input_value("int", r, i);
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    float* in = rs[static_cast<size_t>(r)].data();
    NCCL_OK(ncclReduceScatter(in, in + static_cast<size_t>(r) * recvcount, recvcount, ncclFloat32,
                              ncclSum, comms[static_cast<size_t>(r)], nullptr));
    float* a = ar[static_cast<size_t>(r)].data();
    NCCL_OK(
        ncclAllReduce(a, a, 1000, ncclFloat32, ncclSum, comms[static_cast<size_t>(r)], nullptr));
  }
  NCCL_OK(ncclGroupEnd());
  const bool exact = codec == "none" || codec == "sparse";
  std::string verdict = "OK";
  for (int r = 0; r < nranks; ++r) {
    g_rank = r;
    const std::vector<double> want = exact_chunk("int", recvcount, ncclSum);
    const float* mine = rs[static_cast<size_t>(r)].data() + static_cast<size_t>(r) * recvcount;
    bool finite = true;
    const double nmse =
        chunk_nmse(ncclFloat32, mine, want, exact_mean_square("int", recvcount, ncclSum), &finite);
    if (!finite || nmse > (exact ? 0 : 1e-3)) verdict = "FAIL rank " + std::to_string(r);
    if (ar[static_cast<size_t>(r)] != ar[0]) verdict = "FAIL the AllReduce results differ";
  }
  report("rs-group-one-thread", verdict);
  for (ncclComm_t c : comms)
    NCCL_OK(ncclCommDestroy(c));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using sketchccl::testing::count_arg;
  using sketchccl::testing::kReduceScatter;
  using sketchccl::testing::Ranks;
  using sketchccl::testing::WorkerArgs;
  const char* codec_env = std::getenv("SKETCHCCL_CODEC");
  const std::string codec = codec_env ? codec_env : "auto";
  const std::vector<sketchccl::testing::Scenario> scenarios = {
      {"group", 0, Ranks::kOneProcess,
       [&codec](ncclComm_t, const WorkerArgs& wa) {
         return scenario_group_single_thread(wa.nranks, codec);
       }},
      // matrix DATA RECVCOUNT...
      {"matrix", 1, Ranks::kCommunicator,
       [&codec](ncclComm_t comm, const WorkerArgs& wa) {
         std::vector<size_t> counts;
         for (size_t i = 1; i < wa.args.size(); ++i)
           counts.push_back(count_arg(wa, i));
         return scenario_matrix(comm, codec, wa.args[0], counts);
       }},
      {"bad", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) { return scenario_bad_input(comm); }},
      {"mismatch", 0, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs&) {
         return scenario_count_mismatch(kReduceScatter, comm, g_rank, g_nranks);
       }},
      {"kill", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_kill(kReduceScatter, comm, count_arg(wa, 0), g_rank, g_nranks);
       }},
      {"once", 1, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) { return scenario_once(comm, count_arg(wa, 0)); }},
      // ef RECVCOUNT K
      {"ef", 2, Ranks::kCommunicator,
       [](ncclComm_t comm, const WorkerArgs& wa) {
         return scenario_error_feedback(comm, count_arg(wa, 0), std::atoi(wa.args[1].c_str()));
       }},
  };
  // After a failed call the communicator reports that failure: it is destroyed all the same.
  return sketchccl::testing::run_worker(argc, argv, scenarios, &g_rank, &g_nranks);
}
