// The per-call config reader (coll_config.h): what it accepts, what makes NCCL run the call, and
// SketchCCL's options in `ext`.
#include "src/api/coll_config.h"

#include <gtest/gtest.h>

#include <vector>

namespace sketchccl::api {
namespace {

ncclConfigExt_t option(int vendor, int id) {
  ncclConfigExt_t e{};
  e.key.vendorId = vendor;
  e.key.optionId = id;
  return e;
}

TEST(CollConfig, NullIsThePlainCall) {
  const CollOptions o = read_coll_config(nullptr);
  EXPECT_TRUE(o.invalid.empty());
  EXPECT_TRUE(o.needs_nccl.empty());
  EXPECT_FALSE(o.exact);
  EXPECT_FALSE(o.has_codec);
}

TEST(CollConfig, TheInitializerMayBeTakenOver) {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  const CollOptions o = read_coll_config(&c);
  EXPECT_TRUE(o.invalid.empty()) << o.invalid;
  EXPECT_TRUE(o.needs_nccl.empty()) << o.needs_nccl;
  // A preference NCCL may ignore is no reason to forward.
  c.algSelection = "TREE_SIMPLE";
  c.forceAlgSelection = 0;
  EXPECT_TRUE(read_coll_config(&c).needs_nccl.empty());
}

TEST(CollConfig, AnUninitializedOrTooSmallConfigIsInvalid) {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.magic = 0;
  EXPECT_NE(read_coll_config(&c).invalid.find("NCCL_COLLCONFIG_INITIALIZER"), std::string::npos);
  c = NCCL_COLLCONFIG_INITIALIZER;
  c.size = 40;
  EXPECT_NE(read_coll_config(&c).invalid.find("smaller"), std::string::npos);
  c = NCCL_COLLCONFIG_INITIALIZER;
  c.version = 22809;
  EXPECT_NE(read_coll_config(&c).invalid.find("older"), std::string::npos);
}

TEST(CollConfig, ForcedAlgorithmsCtasAndLaunchEventsNeedNccl) {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.algSelection = "RING_LL";
  EXPECT_NE(read_coll_config(&c).needs_nccl.find("RING_LL"), std::string::npos);
  for (int ncclCollConfig_t::*field :
       {&ncclCollConfig_t::minCTAs, &ncclCollConfig_t::maxCTAs, &ncclCollConfig_t::nvlsCTAs,
        &ncclCollConfig_t::cgaClusterSize, &ncclCollConfig_t::CTAPolicy}) {
    c = NCCL_COLLCONFIG_INITIALIZER;
    c.*field = 2;
    EXPECT_FALSE(read_coll_config(&c).needs_nccl.empty());
  }
  c = NCCL_COLLCONFIG_INITIALIZER;
  int event = 0;
  c.launchCompletionEvent = reinterpret_cast<cudaEvent_t>(&event);
  EXPECT_FALSE(read_coll_config(&c).needs_nccl.empty());
  // 2.31's 64-byte struct has no event: whatever lies past the caller's size is not read.
  c.size = 64;
  EXPECT_TRUE(read_coll_config(&c).needs_nccl.empty());
}

TEST(CollConfig, SketchCclsOptionsAmongOtherVendors) {
  ncclConfigExt_t other = option(0x42, kOptionCodec);
  other.val.s = "not a codec";  // another vendor's: not ours to read
  ncclConfigExt_t codec = option(kSketchcclVendorId, kOptionCodec);
  codec.val.s = "q4";
  ncclConfigExt_t exact = option(kSketchcclVendorId, kOptionExact);
  exact.val.i = 1;
  other.next = &codec;
  codec.next = &exact;
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.ext = &other;
  const CollOptions o = read_coll_config(&c);
  EXPECT_TRUE(o.invalid.empty()) << o.invalid;
  EXPECT_TRUE(o.has_codec);
  EXPECT_EQ(o.codec, kernels::CodecId::kQ4);
  EXPECT_TRUE(o.exact);
}

TEST(CollConfig, BadExtListsAreInvalid) {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  ncclConfigExt_t unknown = option(kSketchcclVendorId, 99);
  c.ext = &unknown;
  EXPECT_NE(read_coll_config(&c).invalid.find("no option 99"), std::string::npos);
  ncclConfigExt_t codec = option(kSketchcclVendorId, kOptionCodec);
  codec.val.s = nullptr;
  c.ext = &codec;
  EXPECT_NE(read_coll_config(&c).invalid.find("codec"), std::string::npos);
  ncclConfigExt_t a = option(7, 1), b = option(7, 1);
  a.next = &b;
  c.ext = &a;
  EXPECT_NE(read_coll_config(&c).invalid.find("repeats"), std::string::npos);
  std::vector<ncclConfigExt_t> ring(3);
  for (int i = 0; i < 3; ++i) {
    ring[i] = option(8, i);
    ring[i].next = &ring[(i + 1) % 3];  // circular: keys repeat on the second lap
  }
  c.ext = ring.data();
  EXPECT_FALSE(read_coll_config(&c).invalid.empty());
}

}  // namespace
}  // namespace sketchccl::api
