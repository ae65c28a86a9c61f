// The peer baseline: Open MPI's MPI_Allreduce (fp32 sum, host memory) timed the way
// sketchccl-perf times ncclAllReduce, printing the same columns (the error columns are those of
// the check of the last timed call against the exact sum; wire/in is N/A: MPI does not say).
//
//   mpirun -np 4 mpi-allreduce-perf -b 1M -e 64M -f 2 -n 5 -w 1
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings do not build warning-free)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/bench/perf_common.h"

namespace {

[[noreturn]] void usage_error(int rank, const std::string& msg) {
  if (rank == 0)
    std::fprintf(stderr,
                 "mpi-allreduce-perf: %s\nUsage: mpi-allreduce-perf [-b SIZE] [-e SIZE] [-f N] "
                 "[-n ITERS] [-w WARMUP] [-c 0|1]\n",
                 msg.c_str());
  MPI_Finalize();
  std::exit(2);
}

// Inputs on the same 2^-12 grid as sketchccl-perf's gauss data (not the same values: only the
// timing matters here, the check just proves the sum is right).
float value(int r, size_t i) {
  uint64_t x =
      ((static_cast<uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ull) ^ (i * 0xd6e8feb86659fd93ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<int>(x % 65536) - 32768) / 4096.0f;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t minb = 32u << 20, maxb = 32u << 20, stepb = 1u << 20;
  long factor = 0, iters = 20, warmup = 5, check = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage_error(rank, "option " + a + " needs a value");
    std::string v = argv[++i];
    bool ok = true;
    if (a == "-b") {
      ok = perfutil::parse_bytes(v, &minb);
    } else if (a == "-e") {
      ok = perfutil::parse_bytes(v, &maxb);
    } else if (a == "-i") {
      ok = perfutil::parse_bytes(v, &stepb) && stepb > 0;
    } else if (a == "-f") {
      ok = perfutil::parse_int(v, 1, 1 << 20, &factor);
    } else if (a == "-n") {
      ok = perfutil::parse_int(v, 1, 1 << 30, &iters);
    } else if (a == "-w") {
      ok = perfutil::parse_int(v, 0, 1 << 30, &warmup);
    } else if (a == "-c") {
      ok = perfutil::parse_int(v, 0, 1, &check);
    } else {
      usage_error(rank, "unknown option " + a);
    }
    if (!ok) usage_error(rank, "bad value '" + v + "' for " + a);
  }
  if (minb > maxb) usage_error(rank, "-b is larger than -e");
  const size_t maxcount = maxb / 4;
  std::vector<float> send(maxcount), recv(maxcount);
  for (size_t i = 0; i < maxcount; ++i)
    send[i] = value(rank, i);
  if (rank == 0) {
    std::printf("# mpi-allreduce-perf: MPI_Allreduce, nranks %d, float sum, host memory\n", nranks);
    std::printf(
        "#       size         count      type   redop    root     time    algbw    busbw"
        "      nmse    maxrel  wire/in\n");
    std::printf(
        "#        (B)    (elements)                               (us)   (GB/s)   (GB/s)\n");
  }
  double bw_sum = 0;
  int nsizes = 0;
  for (size_t bytes = minb; bytes <= maxb && bytes > 0;
       bytes = factor > 0 ? bytes * static_cast<size_t>(factor) : bytes + stepb) {
    const size_t count = bytes / 4;
    const int n = static_cast<int>(count);
    for (long w = 0; w < warmup; ++w)
      MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    for (long it = 0; it < iters; ++it)
      MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                static_cast<double>(iters) * 1e6;
    double algbw = static_cast<double>(count * 4) / (us * 1e3);
    double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    std::string nmse = "N/A", maxrel = "N/A";
    if (check && rank == 0) {
      double err = 0, ref = 0, maxe = 0, maxr = 0;
      for (size_t i = 0; i < count; ++i) {
        double x = 0;
        for (int r = 0; r < nranks; ++r)
          x += value(r, i);
        double d = recv[i] - x;
        err += d * d;
        ref += x * x;
        maxe = std::max(maxe, std::fabs(d));
        maxr = std::max(maxr, std::fabs(x));
      }
      char b[32];
      std::snprintf(b, sizeof b, err == 0 ? "0" : "%.2e", ref > 0 ? err / ref : err);
      nmse = b;
      std::snprintf(b, sizeof b, maxe == 0 ? "0" : "%.2e", maxr > 0 ? maxe / maxr : maxe);
      maxrel = b;
    }
    if (rank == 0) {
      std::printf("%12zu  %12zu  %8s  %6s  %6d  %9.1f  %7.3f  %7.3f  %8s  %8s  %7s\n", count * 4,
                  count, "float", "sum", -1, us, algbw, busbw, nmse.c_str(), maxrel.c_str(), "N/A");
      std::fflush(stdout);
    }
    bw_sum += busbw;
    ++nsizes;
    if (factor == 1) break;
  }
  if (rank == 0) std::printf("# Avg bus bandwidth    : %g \n#\n", nsizes ? bw_sum / nsizes : 0.0);
  MPI_Finalize();
  return 0;
}
