// What standalone mode does not implement is refused, never run half-way: ncclInvalidUsage (or,
// for a function without a result code, its documented failure value) with the reason in
// ncclGetLastError. In process, linked against libsketchccl.so with SKETCHCCL_NCCL_LIB=none.
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "sketchccl_build_config.h"
#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

// NCCL exports it without declaring it in any header.
extern "C" void ncclResetDebugInitInternal();

namespace {

// The last error names `api` and says why.
void expect_refused_text(const char* api) {
  const std::string text = ncclGetLastError(nullptr);
  EXPECT_NE(text.find(std::string(api) + " is not implemented in standalone mode"),
            std::string::npos)
      << text;
}

void expect_refused(const char* api, ncclResult_t r) {
  EXPECT_EQ(r, ncclInvalidUsage) << api;
  expect_refused_text(api);
}

TEST(Standalone, IsTheModeHere) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
}

TEST(Standalone, RefusesTheCallsItDoesNotImplement) {
  expect_refused("ncclCommRevoke", ncclCommRevoke(nullptr, 0));
  ncclComm_t child = nullptr;
  expect_refused("ncclCommShrink", ncclCommShrink(nullptr, nullptr, 0, &child, nullptr, 0));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  expect_refused("ncclGroupSimulateEnd", ncclGroupSimulateEnd(&sim));
}

TEST(Standalone, ResetDebugInitDoesNothing) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  ncclResetDebugInitInternal();
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
}

#if SKETCHCCL_NCCL_DEVICE_API
TEST(Standalone, RefusesTheDeviceApi) {
  ncclDevCommRequirements_t reqs{};
  alignas(64) unsigned char space[512] = {};
  auto* dc = reinterpret_cast<ncclDevComm_t*>(space);
  expect_refused("ncclDevCommCreate", ncclDevCommCreate(nullptr, &reqs, dc));
  expect_refused("ncclDevCommDestroy", ncclDevCommDestroy(nullptr, dc));
  // The team functions: a team of no ranks, of which no rank is part.
  using TeamFn = ncclTeam_t (*)(ncclComm_t);  // the host overload (C++ adds a device one)
  const std::pair<const char*, TeamFn> teams[] = {{"ncclTeamWorld", ncclTeamWorld},
                                                  {"ncclTeamLsa", ncclTeamLsa},
                                                  {"ncclTeamRail", ncclTeamRail}};
  for (const auto& [api, fn] : teams) {
    const ncclTeam_t t = fn(nullptr);
    EXPECT_EQ(t.nRanks, 0) << api;
    EXPECT_EQ(t.rank, -1) << api;
    EXPECT_EQ(t.stride, 0) << api;
    expect_refused_text(api);
  }
  const ncclTeam_t team = {2, 0, 1};
  EXPECT_EQ(ncclTeamRankToWorld(nullptr, team, 1), -1);
  expect_refused_text("ncclTeamRankToWorld");
  EXPECT_EQ(ncclTeamRankToLsa(nullptr, team, 1), -1);
  expect_refused_text("ncclTeamRankToLsa");
  EXPECT_EQ(ncclLLA2ACalcSlots(6, 8), -1);
  expect_refused_text("ncclLLA2ACalcSlots");
  ncclDevResourceRequirements_t req{};
  expect_refused("ncclLsaBarrierCreateRequirement",
                 ncclLsaBarrierCreateRequirement(
                     team, 1, reinterpret_cast<ncclLsaBarrierHandle_t*>(space), &req));
  expect_refused("ncclGinBarrierCreateRequirement",
                 ncclGinBarrierCreateRequirement(
                     nullptr, team, 1, reinterpret_cast<ncclGinBarrierHandle_t*>(space), &req));
  expect_refused(
      "ncclLLA2ACreateRequirement",
      ncclLLA2ACreateRequirement(1, 1, reinterpret_cast<ncclLLA2AHandle_t*>(space), &req));
}
#endif

}  // namespace
