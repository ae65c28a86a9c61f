#include "src/interpose/reduce_scatter_run.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace sketchccl::interpose {
namespace {

// Rank `rank` of `nranks`, recvcount elements per rank.
ReduceScatterCall call_of(const void* send, void* recv, size_t recvcount, int rank, int nranks) {
  ReduceScatterCall call;
  call.send = send;
  call.recv = recv;
  call.recvcount = recvcount;
  call.rank = rank;
  call.nranks = nranks;
  return call;
}

TEST(ValidateReduceScatter, AcceptsApartAndNcclsInPlace) {
  std::vector<float> in(4 * 16), out(16);
  kernels::ElemType et{};
  EXPECT_TRUE(validate_reduce_scatter(call_of(in.data(), out.data(), 16, 2, 4), &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF32);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(validate_reduce_scatter(call_of(in.data(), in.data() + 16 * r, 16, r, 4), &et).ok())
        << "rank " << r;
  }
  ReduceScatterCall half = call_of(in.data(), out.data(), 16, 0, 4);
  half.type = ncclFloat16;
  half.op = ncclAvg;
  EXPECT_TRUE(validate_reduce_scatter(half, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF16);
  // No elements: the buffers are not looked at.
  EXPECT_TRUE(validate_reduce_scatter(call_of(nullptr, nullptr, 0, 0, 4), &et).ok());
}

TEST(ValidateReduceScatter, RefusesWhatNcclForbids) {
  std::vector<float> in(4 * 16 + 1), out(16);
  kernels::ElemType et{};
  auto code = [&](const ReduceScatterCall& c) { return validate_reduce_scatter(c, &et).code(); };
  // Another rank's chunk, a chunk shifted by one element, the input's start on rank 1.
  EXPECT_EQ(code(call_of(in.data(), in.data() + 16, 16, 2, 4)), Code::kInvalidArgument);
  EXPECT_EQ(code(call_of(in.data(), in.data() + 33, 16, 2, 4)), Code::kInvalidArgument);
  EXPECT_EQ(code(call_of(in.data(), in.data(), 16, 1, 4)), Code::kInvalidArgument);
  // Just past the input (4 elements for recvcount 1) is apart, just inside it is not.
  EXPECT_TRUE(validate_reduce_scatter(call_of(in.data(), in.data() + 4, 1, 0, 4), &et).ok());
  EXPECT_EQ(code(call_of(in.data(), in.data() + 3, 1, 0, 4)), Code::kInvalidArgument);
  EXPECT_EQ(code(call_of(nullptr, out.data(), 16, 0, 4)), Code::kInvalidArgument);
  EXPECT_EQ(code(call_of(in.data(), nullptr, 16, 0, 4)), Code::kInvalidArgument);
  ReduceScatterCall misaligned =
      call_of(reinterpret_cast<char*>(in.data()) + 1, out.data(), 4, 0, 4);
  EXPECT_EQ(code(misaligned), Code::kInvalidArgument);
  ReduceScatterCall ints = call_of(in.data(), out.data(), 16, 0, 4);
  ints.type = ncclInt32;
  EXPECT_EQ(code(ints), Code::kInvalidUsage);
  ReduceScatterCall max = call_of(in.data(), out.data(), 16, 0, 4);
  max.op = ncclMax;
  EXPECT_EQ(code(max), Code::kInvalidUsage);
  ReduceScatterCall mixed = call_of(in.data(), out.data(), 16, 0, 4);
  mixed.mem.mixed = true;
  EXPECT_EQ(code(mixed), Code::kInvalidArgument);
  ReduceScatterCall huge = call_of(in.data(), out.data(), SIZE_MAX / 8, 0, 4);
  EXPECT_EQ(code(huge), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sketchccl::interpose
