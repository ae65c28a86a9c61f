#include "src/interpose/allreduce_run.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>

#include <vector>

#include "src/interpose/real_api.h"
#include "src/interpose/result.h"

namespace sketchccl::interpose {
namespace {

AllReduceCall host_call(const void* send, void* recv, size_t count) {
  AllReduceCall call;
  call.send = send;
  call.recv = recv;
  call.count = count;
  return call;
}

TEST(ClassifyBuffers, HostMemoryIsHostAndNotMixed) {
  std::vector<float> a(16), b(16);
  BufferMemory m = classify_buffers(a.data(), 64, b.data(), 64);
  EXPECT_TRUE(m.known);
  EXPECT_EQ(m.type, backend::MemoryType::kHost);
  EXPECT_FALSE(m.mixed);
  m = classify_buffers(nullptr, 0, nullptr, 0);
  EXPECT_TRUE(m.known);
  EXPECT_EQ(m.type, backend::MemoryType::kHost);
  EXPECT_FALSE(m.mixed);
}

// A mapping that cannot be read (as CUDA's device reservations look to a process without CUDA)
// is not host memory: unknown, never read (the check faults in the kernel, not here).
TEST(ClassifyBuffers, UnreadableMemoryIsUnknownAndRefusedStandalone) {
  const size_t bytes = size_t(4) << 20;
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<float> ok(16);
  BufferMemory m = classify_buffers(p, bytes, p, bytes);
  EXPECT_FALSE(m.known);
  EXPECT_STRNE(m.why, "");
  m = classify_buffers(ok.data(), 64, p, bytes);
  EXPECT_FALSE(m.known);
  // Readable at its start but not at its end: unknown too.
  auto* half = static_cast<char*>(
      mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(half, MAP_FAILED);
  ASSERT_EQ(mprotect(half + 4096, 4096, PROT_NONE), 0);
  EXPECT_TRUE(classify_buffers(half, 4096, half, 4096).known);
  EXPECT_FALSE(classify_buffers(half, 4097, half, 4097).known);
  AllReduceCall call = host_call(p, p, bytes / 4);
  call.mem = classify_buffers(p, bytes, p, bytes);
  kernels::ElemType et{};
  Status st = validate_allreduce(call, &et);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot classify"), std::string::npos) << st.message();
  munmap(half, 2 * 4096);
  munmap(p, bytes);
}

TEST(NcclBytes, SizesEveryTypeAndSaturates) {
  EXPECT_EQ(nccl_bytes(ncclFloat32, 10), 40u);
  EXPECT_EQ(nccl_bytes(ncclBfloat16, 10), 20u);
  EXPECT_EQ(nccl_bytes(ncclFloat64, 10), 80u);
  EXPECT_EQ(nccl_bytes(ncclInt8, 10), 10u);
  EXPECT_EQ(nccl_bytes(ncclFloat32, SIZE_MAX / 2), SIZE_MAX);
}

TEST(ValidateAllReduce, AcceptsFloatSumsInPlaceAndApart) {
  std::vector<float> a(16), b(16);
  kernels::ElemType et{};
  EXPECT_TRUE(validate_allreduce(host_call(a.data(), b.data(), 16), &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF32);
  EXPECT_TRUE(validate_allreduce(host_call(a.data(), a.data(), 16), &et).ok());
  AllReduceCall half = host_call(a.data(), b.data(), 32);
  half.type = ncclBfloat16;
  half.op = ncclAvg;
  EXPECT_TRUE(validate_allreduce(half, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kBf16);
  // Nothing to move: null buffers are fine.
  EXPECT_TRUE(validate_allreduce(host_call(nullptr, nullptr, 0), &et).ok());
}

TEST(ValidateAllReduce, RefusesWhatNeitherEngineRuns) {
  std::vector<float> a(16), b(16);
  kernels::ElemType et{};
  AllReduceCall call = host_call(a.data(), b.data(), 16);
  call.type = ncclFloat64;
  EXPECT_EQ(validate_allreduce(call, &et).code(), Code::kInvalidUsage);
  call = host_call(a.data(), b.data(), 16);
  call.op = ncclMax;
  EXPECT_EQ(validate_allreduce(call, &et).code(), Code::kInvalidUsage);
  EXPECT_EQ(validate_allreduce(host_call(nullptr, b.data(), 16), &et).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(validate_allreduce(host_call(a.data() + 1, a.data(), 8), &et).code(),
            Code::kInvalidArgument);  // partial overlap
  call = host_call(reinterpret_cast<char*>(a.data()) + 1, b.data(), 4);
  EXPECT_EQ(validate_allreduce(call, &et).code(), Code::kInvalidArgument);  // misaligned
  call = host_call(a.data(), b.data(), 16);
  call.mem.type = backend::MemoryType::kDevice;
  call.mem.mixed = true;
  Status st = validate_allreduce(call, &et);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("must both be device memory or both host memory"), std::string::npos)
      << st.message();
}

TEST(Result, CodesConvertToTheirNcclResults) {
  EXPECT_EQ(to_nccl(Code::kOk), ncclSuccess);
  EXPECT_EQ(to_nccl(Code::kInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(to_nccl(Code::kInProgress), ncclInProgress);
}

TEST(RealApi, NoLibraryGivesAnEmptyTable) {
  RealApi api = resolve_real_api(nullptr);
  EXPECT_EQ(api.ncclAllReduce, nullptr);
  EXPECT_EQ(api.ncclGetVersion, nullptr);
  EXPECT_EQ(api.ncclResetDebugInit, nullptr);
}

}  // namespace
}  // namespace sketchccl::interpose
