// The calls both fronts run themselves: their buffers' memory, their argument rules (one set per
// kind), and the one conversion to the engine's descriptor.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "src/api/coll_call.h"
#include "src/api/memory.h"
#include "src/api/result.h"
#include "src/api/submit.h"
#include "src/api/validate.h"

namespace sketchccl::api {
namespace {

CollCall all_reduce(const void* send, void* recv, size_t count) {
  return make_call(CollKind::kAllReduce, "ncclAllReduce", send, recv, count, ncclFloat32, ncclSum,
                   0, nullptr, nullptr);
}

// recvcount elements per rank.
CollCall reduce_scatter(const void* send, void* recv, size_t recvcount) {
  return make_call(CollKind::kReduceScatter, "ncclReduceScatter", send, recv, recvcount,
                   ncclFloat32, ncclSum, 0, nullptr, nullptr);
}

// sendcount elements per rank.
CollCall all_gather(const void* send, void* recv, size_t sendcount) {
  return make_call(CollKind::kAllGather, "ncclAllGather", send, recv, sendcount, ncclFloat32,
                   ncclSum, 0, nullptr, nullptr);
}

Status check(const CollCall& call, int rank = 0, int nranks = 4) {
  kernels::ElemType et{};
  return validate(call, rank, nranks, &et);
}

TEST(CollCall, NamesAndKinds) {
  CollCall c = all_reduce(nullptr, nullptr, 0);
  EXPECT_STREQ(c.name(), "AllReduce");
  EXPECT_TRUE(reduces(CollKind::kReduce));
  EXPECT_FALSE(reduces(CollKind::kBcast));
  EXPECT_TRUE(compressible(CollKind::kReduceScatter));
  EXPECT_FALSE(compressible(CollKind::kReduce));
}

TEST(CollCall, InputCountIsNranksChunksForReduceScatterAndSaturates) {
  EXPECT_EQ(input_count(all_reduce(nullptr, nullptr, 10), 4), 10u);
  EXPECT_EQ(input_count(reduce_scatter(nullptr, nullptr, 10), 4), 40u);
  EXPECT_EQ(input_count(reduce_scatter(nullptr, nullptr, 10), 0), 10u);
  EXPECT_EQ(input_count(reduce_scatter(nullptr, nullptr, SIZE_MAX / 2), 4), SIZE_MAX / 4);
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
  CollCall call = all_reduce(p, p, bytes / 4);
  call.mem = classify(call, 4);
  Status st = check(call);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot classify"), std::string::npos) << st.message();
  munmap(half, 2 * 4096);
  munmap(p, bytes);
}

// A ReduceScatter's input is nranks chunks: its end is classified, not the output's size.
TEST(ClassifyBuffers, AReduceScatterIsClassifiedOverItsWholeInput) {
  const size_t page = 4096;
  auto* two = static_cast<char*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(two, MAP_FAILED);
  ASSERT_EQ(mprotect(two + page, page, PROT_NONE), 0);
  std::vector<float> out(page / 4);
  // 2 ranks · a page of floats reach into the unreadable page; 1 rank does not.
  CollCall call = reduce_scatter(two, out.data(), page / 4);
  EXPECT_TRUE(classify(call, 1).known);
  EXPECT_FALSE(classify(call, 2).known);
  munmap(two, 2 * page);
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
  EXPECT_TRUE(validate(all_reduce(a.data(), b.data(), 16), 0, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF32);
  EXPECT_TRUE(check(all_reduce(a.data(), a.data(), 16)).ok());
  CollCall half = all_reduce(a.data(), b.data(), 32);
  half.type = ncclBfloat16;
  half.op = ncclAvg;
  EXPECT_TRUE(validate(half, 0, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kBf16);
  // Nothing to move: null buffers are fine.
  EXPECT_TRUE(check(all_reduce(nullptr, nullptr, 0)).ok());
}

TEST(ValidateAllReduce, RefusesWhatTheRingDoesNotRun) {
  std::vector<float> a(16), b(16);
  CollCall call = all_reduce(a.data(), b.data(), 16);
  call.type = ncclFloat64;
  EXPECT_EQ(check(call).code(), Code::kInvalidUsage);
  call = all_reduce(a.data(), b.data(), 16);
  call.op = ncclMax;
  EXPECT_EQ(check(call).code(), Code::kInvalidUsage);
  EXPECT_EQ(check(all_reduce(nullptr, b.data(), 16)).code(), Code::kInvalidArgument);
  EXPECT_EQ(check(all_reduce(a.data() + 1, a.data(), 8)).code(),
            Code::kInvalidArgument);  // partial overlap
  call = all_reduce(reinterpret_cast<char*>(a.data()) + 1, b.data(), 4);
  EXPECT_EQ(check(call).code(), Code::kInvalidArgument);  // misaligned
  call = all_reduce(a.data(), b.data(), 16);
  call.mem.type = backend::MemoryType::kDevice;
  call.mem.mixed = true;
  Status st = check(call);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("must both be device memory or both host memory"), std::string::npos)
      << st.message();
  // A kind the ring does not run is not validated as one.
  call = all_reduce(a.data(), b.data(), 16);
  call.kind = CollKind::kReduce;
  EXPECT_EQ(check(call).code(), Code::kInternalError);
}

TEST(ValidateReduceScatter, AcceptsApartAndNcclsInPlace) {
  std::vector<float> in(4 * 16), out(16);
  kernels::ElemType et{};
  EXPECT_TRUE(validate(reduce_scatter(in.data(), out.data(), 16), 2, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF32);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(check(reduce_scatter(in.data(), in.data() + 16 * r, 16), r, 4).ok())
        << "rank " << r;
  }
  CollCall half = reduce_scatter(in.data(), out.data(), 16);
  half.type = ncclFloat16;
  half.op = ncclAvg;
  EXPECT_TRUE(validate(half, 0, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF16);
  // No elements: the buffers are not looked at.
  EXPECT_TRUE(check(reduce_scatter(nullptr, nullptr, 0)).ok());
}

TEST(ValidateReduceScatter, RefusesWhatNcclForbids) {
  std::vector<float> in(4 * 16 + 1), out(16);
  auto code = [&](const CollCall& c, int rank) { return check(c, rank, 4).code(); };
  // Another rank's chunk, a chunk shifted by one element, the input's start on rank 1.
  EXPECT_EQ(code(reduce_scatter(in.data(), in.data() + 16, 16), 2), Code::kInvalidArgument);
  EXPECT_EQ(code(reduce_scatter(in.data(), in.data() + 33, 16), 2), Code::kInvalidArgument);
  EXPECT_EQ(code(reduce_scatter(in.data(), in.data(), 16), 1), Code::kInvalidArgument);
  // Just past the input (4 elements for recvcount 1) is apart, just inside it is not.
  EXPECT_TRUE(check(reduce_scatter(in.data(), in.data() + 4, 1)).ok());
  EXPECT_EQ(code(reduce_scatter(in.data(), in.data() + 3, 1), 0), Code::kInvalidArgument);
  EXPECT_EQ(code(reduce_scatter(nullptr, out.data(), 16), 0), Code::kInvalidArgument);
  EXPECT_EQ(code(reduce_scatter(in.data(), nullptr, 16), 0), Code::kInvalidArgument);
  CollCall misaligned = reduce_scatter(reinterpret_cast<char*>(in.data()) + 1, out.data(), 4);
  EXPECT_EQ(code(misaligned, 0), Code::kInvalidArgument);
  CollCall ints = reduce_scatter(in.data(), out.data(), 16);
  ints.type = ncclInt32;
  EXPECT_EQ(code(ints, 0), Code::kInvalidUsage);
  CollCall max = reduce_scatter(in.data(), out.data(), 16);
  max.op = ncclMax;
  EXPECT_EQ(code(max, 0), Code::kInvalidUsage);
  CollCall mixed = reduce_scatter(in.data(), out.data(), 16);
  mixed.mem.mixed = true;
  EXPECT_EQ(code(mixed, 0), Code::kInvalidArgument);
  CollCall huge = reduce_scatter(in.data(), out.data(), SIZE_MAX / 8);
  EXPECT_EQ(code(huge, 0), Code::kInvalidArgument);
}

TEST(ValidateAllGather, AcceptsFloatsApartAndNcclsInPlaceWithAnyOp) {
  std::vector<float> in(16), out(4 * 16);
  kernels::ElemType et{};
  EXPECT_TRUE(validate(all_gather(in.data(), out.data(), 16), 2, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kF32);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(check(all_gather(out.data() + 16 * r, out.data(), 16), r, 4).ok()) << "rank " << r;
  }
  CollCall bf = all_gather(in.data(), out.data(), 16);
  bf.type = ncclBfloat16;
  bf.op = ncclMax;  // an AllGather has no op: whatever the export passed is not looked at
  EXPECT_TRUE(validate(bf, 0, 4, &et).ok());
  EXPECT_EQ(et, kernels::ElemType::kBf16);
  EXPECT_TRUE(check(all_gather(nullptr, nullptr, 0)).ok());
  EXPECT_EQ(output_count(all_gather(in.data(), out.data(), 16), 4), 64u);
  EXPECT_EQ(output_count(all_gather(in.data(), out.data(), SIZE_MAX / 2), 4), SIZE_MAX / 4);
}

TEST(ValidateAllGather, RefusesWhatNcclForbids) {
  std::vector<float> in(16), out(4 * 16 + 1);
  auto code = [&](const CollCall& c, int rank) { return check(c, rank, 4).code(); };
  // Another rank's place, a place shifted by one element.
  EXPECT_EQ(code(all_gather(out.data() + 16, out.data(), 16), 2), Code::kInvalidArgument);
  EXPECT_EQ(code(all_gather(out.data() + 33, out.data(), 16), 2), Code::kInvalidArgument);
  EXPECT_EQ(code(all_gather(nullptr, out.data(), 16), 0), Code::kInvalidArgument);
  EXPECT_EQ(code(all_gather(in.data(), nullptr, 16), 0), Code::kInvalidArgument);
  CollCall ints = all_gather(in.data(), out.data(), 16);
  ints.type = ncclInt32;
  EXPECT_EQ(code(ints, 0), Code::kInvalidUsage);
  CollCall huge = all_gather(in.data(), out.data(), SIZE_MAX / 8);
  EXPECT_EQ(code(huge, 0), Code::kInvalidArgument);
}

TEST(EngineArgs, OneConversionForEveryKindAndRun) {
  std::vector<float> in(3 * 8), out(8);
  CollCall rs = reduce_scatter(in.data(), out.data(), 8);
  rs.op = ncclAvg;
  rs.elem = kernels::ElemType::kBf16;
  rs.mem.type = backend::MemoryType::kDevice;
  coll::ReductionArgs a = engine_args(rs, 3, EngineRun::kCodec);
  EXPECT_EQ(a.send, in.data());
  EXPECT_EQ(a.recv, out.data());
  EXPECT_EQ(a.count, 24u);  // the input's: three chunks
  EXPECT_EQ(a.type, kernels::ElemType::kBf16);
  EXPECT_TRUE(a.avg);
  EXPECT_EQ(a.mem, backend::MemoryType::kDevice);
  EXPECT_EQ(a.kind, coll::CallKind::kReduceScatter);
  EXPECT_FALSE(a.exact);
  CollCall ar = all_reduce(in.data(), in.data(), 24);
  a = engine_args(ar, 3, EngineRun::kExact);
  EXPECT_EQ(a.count, 24u);
  EXPECT_FALSE(a.avg);
  EXPECT_EQ(a.kind, coll::CallKind::kAllReduce);
  EXPECT_TRUE(a.exact);
  a = engine_args(ar, 3, EngineRun::kRail);
  EXPECT_EQ(a.kind, coll::CallKind::kRail);
  EXPECT_FALSE(a.exact);
}

TEST(Result, CodesConvertToTheirNcclResults) {
  EXPECT_EQ(to_nccl(Code::kOk), ncclSuccess);
  EXPECT_EQ(to_nccl(Code::kInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(to_nccl(Code::kInProgress), ncclInProgress);
}

}  // namespace
}  // namespace sketchccl::api
