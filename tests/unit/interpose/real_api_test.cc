// The real NCCL's table (real_api.h): one pointer per row of nccl_api.def.
#include "src/interpose/real_api.h"

#include <gtest/gtest.h>

namespace sketchccl::interpose {
namespace {

TEST(RealApi, NoLibraryGivesAnEmptyTable) {
  RealApi api = resolve_real_api(nullptr);
  EXPECT_EQ(api.ncclAllReduce, nullptr);
  EXPECT_EQ(api.ncclGetVersion, nullptr);
  EXPECT_EQ(api.ncclResetDebugInit, nullptr);
  EXPECT_EQ(api.ncclResetDebugInitInternal, nullptr);
}

}  // namespace
}  // namespace sketchccl::interpose
