#include "interpose/allreduce_run.h"

#include <gtest/gtest.h>

#include <vector>

#include "interpose/real_api.h"
#include "interpose/result.h"

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
  BufferMemory m = classify_buffers(a.data(), b.data());
  EXPECT_EQ(m.type, backend::MemoryType::kHost);
  EXPECT_FALSE(m.mixed);
  m = classify_buffers(nullptr, nullptr);
  EXPECT_EQ(m.type, backend::MemoryType::kHost);
  EXPECT_FALSE(m.mixed);
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
