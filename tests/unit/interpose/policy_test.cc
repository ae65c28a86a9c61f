#include "src/interpose/policy.h"

#include <gtest/gtest.h>

#include "src/api/validate.h"

namespace sketchccl::interpose {
namespace {

PolicyInput eligible() {
  PolicyInput in;
  in.comm = CommState::kReady;
  in.op = ncclSum;
  in.type = ncclFloat32;
  in.count = 1 << 18;  // exactly 1 MiB
  in.min_bytes = 1 << 20;
  return in;
}

TEST(Policy, TakesOverEligibleFloatSumsAndAverages) {
  EXPECT_TRUE(decide(eligible()).take_over);
  PolicyInput in = eligible();
  in.op = ncclAvg;
  EXPECT_TRUE(decide(in).take_over);
  in.type = ncclBfloat16;
  in.count = 1 << 19;
  EXPECT_TRUE(decide(in).take_over);
  in.type = ncclFloat16;
  EXPECT_TRUE(decide(in).take_over);
}

TEST(Policy, ForwardsEverythingElse) {
  struct Row {
    const char* what;
    void (*change)(PolicyInput&);
  };
  const Row rows[] = {
      {"disabled", [](PolicyInput& in) { in.enabled = false; }},
      {"no state", [](PolicyInput& in) { in.comm = CommState::kNone; }},
      {"configs disagree", [](PolicyInput& in) { in.comm = CommState::kDisagree; }},
      {"join failed", [](PolicyInput& in) { in.comm = CommState::kFailed; }},
      {"max", [](PolicyInput& in) { in.op = ncclMax; }},
      {"min", [](PolicyInput& in) { in.op = ncclMin; }},
      {"prod", [](PolicyInput& in) { in.op = ncclProd; }},
      {"premulsum", [](PolicyInput& in) { in.op = static_cast<ncclRedOp_t>(ncclNumOps); }},
      {"premulsum+3", [](PolicyInput& in) { in.op = static_cast<ncclRedOp_t>(ncclNumOps + 3); }},
      {"float64", [](PolicyInput& in) { in.type = ncclFloat64; }},
      {"int32", [](PolicyInput& in) { in.type = ncclInt32; }},
      {"fp8", [](PolicyInput& in) { in.type = ncclFloat8e4m3; }},
      {"one element short", [](PolicyInput& in) { in.count -= 1; }},
      {"bf16 of half the bytes", [](PolicyInput& in) { in.type = ncclBfloat16; }},
      {"graph capture", [](PolicyInput& in) { in.capturing = true; }},
      {"device memory without CUDA backend",
       [](PolicyInput& in) { in.mem = backend::MemoryType::kDevice; }},
      {"memory that cannot be classified", [](PolicyInput& in) { in.mem_known = false; }},
      {"auto: NCCL alone faster for host buffers", [](PolicyInput& in) { in.no_gain_host = true; }},
      {"auto: NCCL alone faster for device buffers",
       [](PolicyInput& in) {
         in.mem = backend::MemoryType::kDevice;
         in.cuda_backend = true;
         in.no_gain_device = true;
       }},
      {"unclassifiable memory even with a CUDA backend",
       [](PolicyInput& in) {
         in.mem_known = false;
         in.cuda_backend = true;
       }},
  };
  for (const Row& row : rows) {
    PolicyInput in = eligible();
    row.change(in);
    PolicyDecision d = decide(in);
    EXPECT_FALSE(d.take_over) << row.what;
    EXPECT_NE(std::string(d.reason), "") << row.what;
  }
}

// auto's verdict is per memory type: the one for the call's buffers decides.
TEST(Policy, AutosVerdictForTheCallsMemoryDecides) {
  PolicyInput in = eligible();
  in.no_gain_device = true;
  EXPECT_TRUE(decide(in).take_over);  // host buffers: the host verdict (gain) applies
  in.mem = backend::MemoryType::kDevice;
  in.cuda_backend = true;
  const PolicyDecision d = decide(in);
  EXPECT_FALSE(d.take_over);
  EXPECT_EQ(d.why, ForwardReason::kNoGain);
}

// The memory is asked last: a call the rest forwards never queries CUDA.
TEST(Policy, AsksForTheMemoryOnlyWhenTheRestSaysTakeOver) {
  PolicyInput in = eligible();
  in.mem_pending = true;
  PolicyDecision d = decide(in);
  EXPECT_FALSE(d.take_over);
  EXPECT_TRUE(d.needs_memory);
  in.count = 16;
  d = decide(in);
  EXPECT_FALSE(d.needs_memory);
  EXPECT_EQ(d.why, ForwardReason::kSize);
  in = eligible();
  in.mem_known = false;
  EXPECT_EQ(decide(in).why, ForwardReason::kMemory);
}

TEST(Policy, DeviceMemoryIsTakenOverWithACudaBackend) {
  PolicyInput in = eligible();
  in.mem = backend::MemoryType::kDevice;
  in.cuda_backend = true;
  EXPECT_TRUE(decide(in).take_over);
}

// The type/op rule is one (api/validate.h): the policy forwards for type or op exactly the calls
// the validation refuses for them, over every type and op NCCL has (and a PreMulSum op).
TEST(Policy, TypesAndOpsFollowTheOneRule) {
  const ncclRedOp_t premulsum = static_cast<ncclRedOp_t>(ncclNumOps);
  int eligible_pairs = 0;
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, premulsum}) {
      PolicyInput in = eligible();
      in.type = static_cast<ncclDataType_t>(t);
      in.op = op;
      in.count = 1 << 20;  // at least 1 MiB of any type
      const PolicyDecision d = decide(in);
      const bool rule = api::compressed_eligible(in.type, op);
      EXPECT_EQ(rule, d.why != ForwardReason::kType && d.why != ForwardReason::kOp)
          << "type " << t << " op " << op << ": " << d.reason;
      api::CollCall call;
      call.type = in.type;
      call.op = op;
      kernels::ElemType elem;
      EXPECT_EQ(rule, api::compressed_type_and_op(call, &elem).ok())
          << "type " << t << " op " << op;
      eligible_pairs += rule ? 1 : 0;
    }
  }
  EXPECT_EQ(eligible_pairs, 6);  // float32, float16, bfloat16 × sum, avg
}

}  // namespace
}  // namespace sketchccl::interpose
