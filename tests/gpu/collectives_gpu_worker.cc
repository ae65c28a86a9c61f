// One rank of the GPU test of standalone mode's exact calls (collectives_gpu_test.cc): several
// processes share device 0. Host-memory exact calls run next to a device-memory AllReduce (the
// compressed engine, stream-ordered) and the exact calls on device buffers (staged through host
// copies).
//
//   collectives_gpu_worker mixed RANK NRANKS ID_HEX
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/api/rank_report.h"
#include "tests/gpu/cuda_ok.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::report_case;

int g_rank = 0, g_nranks = 1;

void report(const std::string& name, const std::string& verdict) {
  report_case(name, name.data(), name.size(), verdict);
}

int scenario_mixed(ncclComm_t comm) {
  const size_t n = 100003;
  // Host memory: AllGather, Broadcast and a ring exchange of sends and receives.
  std::vector<int32_t> mine(n, g_rank), all(n * static_cast<size_t>(g_nranks), -1);
  NCCL_OK(ncclAllGather(mine.data(), all.data(), n, ncclInt32, comm, nullptr));
  std::string v = "OK";
  for (int q = 0; q < g_nranks; ++q) {
    if (all[static_cast<size_t>(q) * n + n - 1] != q) v = "FAIL AllGather";
  }
  report("host-allgather", v);
  std::vector<double> bc(n, g_rank == 0 ? 2.5 : 0.0);
  NCCL_OK(ncclBcast(bc.data(), n, ncclFloat64, 0, comm, nullptr));
  report("host-bcast", bc == std::vector<double>(n, 2.5) ? "OK" : "FAIL Bcast");
  const int right = (g_rank + 1) % g_nranks, left = (g_rank - 1 + g_nranks) % g_nranks;
  std::vector<int64_t> out(n, g_rank), in(n, -1);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(out.data(), n, ncclInt64, right, comm, nullptr));
  NCCL_OK(ncclRecv(in.data(), n, ncclInt64, left, comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  report("host-sendrecv", in == std::vector<int64_t>(n, left) ? "OK" : "FAIL exchange");

  // Device memory: the float AllReduce (the compressed engine, stream-ordered).
  float* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, n * sizeof(float)));
  std::vector<float> host(n, static_cast<float>(g_rank + 1));
  CUDA_OK(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  NCCL_OK(ncclAllReduce(dev, dev, n, ncclFloat32, ncclSum, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float want = static_cast<float>(g_nranks * (g_nranks + 1) / 2);
  report("device-allreduce", host == std::vector<float>(n, want) ? "OK" : "FAIL sum");
  // The exact calls on device buffers (staged through host copies): Broadcast in place from
  // the last rank, an AllGather into a device buffer, a ring exchange in a group, and an int32
  // max AllReduce.
  const int root = g_nranks - 1;
  std::vector<float> mine_f(n, static_cast<float>(g_rank) + 0.25f);
  CUDA_OK(cudaMemcpy(dev, mine_f.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  NCCL_OK(ncclBroadcast(dev, dev, n, ncclFloat32, root, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost));
  report("device-broadcast",
         host == std::vector<float>(n, static_cast<float>(root) + 0.25f) ? "OK" : "FAIL");
  int32_t* dev_all = nullptr;
  CUDA_OK(cudaMalloc(&dev_all, all.size() * sizeof(int32_t)));
  int32_t* dev_mine = dev_all + static_cast<size_t>(g_rank) * n;  // in place
  CUDA_OK(cudaMemcpy(dev_mine, mine.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
  NCCL_OK(ncclAllGather(dev_mine, dev_all, n, ncclInt32, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<int32_t> back(all.size(), -1);
  CUDA_OK(cudaMemcpy(back.data(), dev_all, back.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  v = "OK";
  for (int q = 0; q < g_nranks; ++q) {
    if (back[static_cast<size_t>(q) * n] != q) v = "FAIL AllGather";
  }
  report("device-allgather", v);
  auto* dev_in = reinterpret_cast<int32_t*>(dev);  // n elements of 4 bytes, reused
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(dev_mine, n, ncclInt32, right, comm, stream));
  NCCL_OK(ncclRecv(dev_in, n, ncclInt32, left, comm, stream));
  NCCL_OK(ncclGroupEnd());
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(back.data(), dev_in, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  report("device-sendrecv", back[0] == left && back[n - 1] == left ? "OK" : "FAIL exchange");
  CUDA_OK(cudaMemcpy(dev_mine, mine.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
  NCCL_OK(ncclAllReduce(dev_mine, dev_mine, n, ncclInt32, ncclMax, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(back.data(), dev_mine, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  report("device-allreduce-int-max", back[0] == g_nranks - 1 ? "OK" : "FAIL max");
  CUDA_OK(cudaFree(dev_all));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sketchccl::testing::WorkerArgs wa;
  if (!sketchccl::testing::parse_worker_args(argc, argv, &wa)) return 2;
  g_rank = wa.rank;
  g_nranks = wa.nranks;
  CUDA_OK(cudaSetDevice(0));  // every rank on the same device
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, wa.id, g_rank));
  if (wa.scenario != "mixed") {
    std::fprintf(stderr, "unknown scenario %s\n", wa.scenario.c_str());
    return 2;
  }
  scenario_mixed(comm);
  NCCL_OK(ncclCommDestroy(comm));
  return g_case_failures ? 1 : 0;
}
