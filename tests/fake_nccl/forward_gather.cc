#include <dlfcn.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sketchccl/sketchccl.h>

#include "tests/fake_nccl/client_util.h"
#include "tests/fake_nccl/forward_cases.h"

namespace forward_client {

void gather_front(ncclComm_t comm, int rank, int nranks) {
  const bool set = std::getenv("SKETCHCCL_ALLGATHER_CODEC") != nullptr;
  void* cp = static_cast<void*>(comm);
  constexpr size_t R = 70001;  // nranks · R floats: over 1 MiB on 4 ranks
  auto value = [](int r, size_t i) {
    return std::cos(0.002f * static_cast<float>(i)) * static_cast<float>(r + 1);
  };
  std::vector<float> x(R), y(R * static_cast<size_t>(nranks), -1.f);
  for (size_t i = 0; i < R; ++i)
    x[i] = value(rank, i);
  using GetStats = int (*)(ncclComm_t, sketchcclCommStats*);
  auto get = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "sketchcclCommGetStats"));
  sketchcclCommStats st;
  std::memset(&st, 0, sizeof st);
  st.size = sizeof st;
  size_t at = log_size();
  ncclResult_t r = ncclAllGather(x.data(), y.data(), R, ncclFloat32, comm, fake_stream(0x58));
  std::string got = log_since(at);
  const int rc = get != nullptr ? get(comm, &st) : -1;
  const std::string line = fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%p stream=0x58",
                               static_cast<void*>(x.data()), static_cast<void*>(y.data()), R, cp);
  if (!set) {
    check("gather/unset-forwarded",
          r == ncclSuccess && got.find(line + "\n") != std::string::npos && rc == 0 &&
              st.allgather_calls == 0,
          got);
  } else {
    double err = 0, ref = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int q = 0; q < nranks; ++q) {
      for (size_t i = 0; i < R; ++i) {
        const float v = y[static_cast<size_t>(q) * R + i], want = value(q, i);
        err += (v - want) * (v - want);
        ref += want * want;
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        hash = (hash ^ bits) * 1099511628211ull;
      }
    }
    check("gather/set-taken-over",
          r == ncclSuccess && got.find("ncclAllGather") == std::string::npos && err / ref < 1e-3 &&
              err > 0 && rc == 0 && st.allgather_calls == 1 && st.allgather_failed == 0 &&
              st.allgather_bytes_in == R * 4 && st.allgather_inter_node_bytes_sent > 0,
          fmt("r=%d nmse=%g calls=%llu; log: ", r, err / ref,
              static_cast<unsigned long long>(st.allgather_calls)) +
              got);
    std::printf("GATHERHASH f32 %016llx\n", static_cast<unsigned long long>(hash));
  }
  if (set) {
    // bfloat16 (over SKETCHCCL_MIN_BYTES gathered): taken over too, close, the same bits.
    constexpr size_t B = 2 * R;
    auto to_bf16 = [](float f) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return static_cast<uint16_t>(u >> 16);
    };
    auto from_bf16 = [](uint16_t h) {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    };
    std::vector<uint16_t> xb(B), yb(B * static_cast<size_t>(nranks), 0);
    for (size_t i = 0; i < B; ++i)
      xb[i] = to_bf16(value(rank, i));
    at = log_size();
    r = ncclAllGather(xb.data(), yb.data(), B, ncclBfloat16, comm, fake_stream(0x5a));
    got = log_since(at);
    double err = 0, ref = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int q = 0; q < nranks; ++q) {
      for (size_t i = 0; i < B; ++i) {
        const uint16_t h = yb[static_cast<size_t>(q) * B + i];
        const float v = from_bf16(h), want = from_bf16(to_bf16(value(q, i)));
        err += (v - want) * (v - want);
        ref += want * want;
        hash = (hash ^ h) * 1099511628211ull;
      }
    }
    std::memset(&st, 0, sizeof st);
    st.size = sizeof st;
    const int rc2 = get != nullptr ? get(comm, &st) : -1;
    check("gather/bf16-taken-over",
          r == ncclSuccess && got.find("ncclAllGather") == std::string::npos && err / ref < 1e-3 &&
              rc2 == 0 && st.allgather_calls == 2 && st.allgather_failed == 0,
          fmt("r=%d nmse=%g calls=%llu; log: ", r, err / ref,
              static_cast<unsigned long long>(st.allgather_calls)) +
              got);
    std::printf("GATHERHASH bf16 %016llx\n", static_cast<unsigned long long>(hash));
  }
  std::vector<int32_t> xi(99, rank), yi(99 * static_cast<size_t>(nranks), -1);
  at = log_size();
  r = ncclAllGather(xi.data(), yi.data(), 99, ncclInt32, comm, fake_stream(0x59));
  got = log_since(at);
  check("gather/int32-forwarded",
        r == ncclSuccess &&
            got.find(fmt("ncclAllGather send=%p recv=%p count=99 type=2 comm=%p stream=0x59\n",
                         static_cast<void*>(xi.data()), static_cast<void*>(yi.data()), cp)) !=
                std::string::npos,
        got);
}

}  // namespace forward_client
