// The real NCCL's functions, resolved once when the library is loaded: one typed pointer per
// function of nccl.h (2.28) that SketchCCL forwards, named after it. A symbol the library lacks is
// null, and a call that needs it fails with missing_real.
#pragma once

#include <nccl.h>

namespace sketchccl::interpose {

struct RealApi {
  // Each pointer holds the twin pncclX (ncclResetDebugInit has none: its plain name).
  decltype(&::pncclGetVersion) ncclGetVersion = nullptr;
  decltype(&::pncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::pncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&::pncclCommInitRankConfig) ncclCommInitRankConfig = nullptr;
  decltype(&::pncclCommInitRankScalable) ncclCommInitRankScalable = nullptr;
  decltype(&::pncclCommInitAll) ncclCommInitAll = nullptr;
  decltype(&::pncclCommSplit) ncclCommSplit = nullptr;
  decltype(&::pncclCommShrink) ncclCommShrink = nullptr;
  decltype(&::pncclCommFinalize) ncclCommFinalize = nullptr;
  decltype(&::pncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::pncclCommAbort) ncclCommAbort = nullptr;
  decltype(&::pncclCommRevoke) ncclCommRevoke = nullptr;
  decltype(&::pncclCommCount) ncclCommCount = nullptr;
  decltype(&::pncclCommUserRank) ncclCommUserRank = nullptr;
  decltype(&::pncclCommCuDevice) ncclCommCuDevice = nullptr;
  decltype(&::pncclCommGetAsyncError) ncclCommGetAsyncError = nullptr;
  decltype(&::pncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::pncclGetLastError) ncclGetLastError = nullptr;
  decltype(&::pncclMemAlloc) ncclMemAlloc = nullptr;
  decltype(&::pncclMemFree) ncclMemFree = nullptr;
  decltype(&::pncclCommRegister) ncclCommRegister = nullptr;
  decltype(&::pncclCommDeregister) ncclCommDeregister = nullptr;
  decltype(&::pncclCommWindowRegister) ncclCommWindowRegister = nullptr;
  decltype(&::pncclCommWindowDeregister) ncclCommWindowDeregister = nullptr;
  decltype(&::pncclRedOpCreatePreMulSum) ncclRedOpCreatePreMulSum = nullptr;
  decltype(&::pncclRedOpDestroy) ncclRedOpDestroy = nullptr;
  decltype(&::pncclAllReduce) ncclAllReduce = nullptr;
  decltype(&::pncclReduce) ncclReduce = nullptr;
  decltype(&::pncclBcast) ncclBcast = nullptr;
  decltype(&::pncclBroadcast) ncclBroadcast = nullptr;
  decltype(&::pncclReduceScatter) ncclReduceScatter = nullptr;
  decltype(&::pncclAllGather) ncclAllGather = nullptr;
  decltype(&::pncclAlltoAll) ncclAlltoAll = nullptr;
  decltype(&::pncclGather) ncclGather = nullptr;
  decltype(&::pncclScatter) ncclScatter = nullptr;
  decltype(&::pncclSend) ncclSend = nullptr;
  decltype(&::pncclRecv) ncclRecv = nullptr;
  decltype(&::pncclGroupStart) ncclGroupStart = nullptr;
  decltype(&::pncclGroupEnd) ncclGroupEnd = nullptr;
  decltype(&::pncclGroupSimulateEnd) ncclGroupSimulateEnd = nullptr;
  void (*ncclResetDebugInit)() = nullptr;  // deprecated, not in nccl.h
};

// Fills the table from a dlopen handle of the real library (all null for a null handle).
RealApi resolve_real_api(void* handle);

}  // namespace sketchccl::interpose
