#include "src/interpose/real_api.h"

#include <dlfcn.h>

namespace sketchccl::interpose {
namespace {

template <typename Fn>
void bind(void* handle, const char* symbol, Fn* slot) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

}  // namespace

// The twin pncclX, never ncclX: NCCL's own calls through its PLT reach SketchCCL's ncclX.
#define SCCL_BIND_TWIN(name) bind(handle, "p" #name, &api.name)

RealApi resolve_real_api(void* handle) {
  RealApi api;
  if (handle == nullptr) return api;
  SCCL_BIND_TWIN(ncclGetVersion);
  SCCL_BIND_TWIN(ncclGetUniqueId);
  SCCL_BIND_TWIN(ncclCommInitRank);
  SCCL_BIND_TWIN(ncclCommInitRankConfig);
  SCCL_BIND_TWIN(ncclCommInitRankScalable);
  SCCL_BIND_TWIN(ncclCommInitAll);
  SCCL_BIND_TWIN(ncclCommSplit);
  SCCL_BIND_TWIN(ncclCommShrink);
  SCCL_BIND_TWIN(ncclCommFinalize);
  SCCL_BIND_TWIN(ncclCommDestroy);
  SCCL_BIND_TWIN(ncclCommAbort);
  SCCL_BIND_TWIN(ncclCommRevoke);
  SCCL_BIND_TWIN(ncclCommCount);
  SCCL_BIND_TWIN(ncclCommUserRank);
  SCCL_BIND_TWIN(ncclCommCuDevice);
  SCCL_BIND_TWIN(ncclCommGetAsyncError);
  SCCL_BIND_TWIN(ncclGetErrorString);
  SCCL_BIND_TWIN(ncclGetLastError);
  SCCL_BIND_TWIN(ncclMemAlloc);
  SCCL_BIND_TWIN(ncclMemFree);
  SCCL_BIND_TWIN(ncclCommRegister);
  SCCL_BIND_TWIN(ncclCommDeregister);
  SCCL_BIND_TWIN(ncclCommWindowRegister);
  SCCL_BIND_TWIN(ncclCommWindowDeregister);
  SCCL_BIND_TWIN(ncclRedOpCreatePreMulSum);
  SCCL_BIND_TWIN(ncclRedOpDestroy);
  SCCL_BIND_TWIN(ncclAllReduce);
  SCCL_BIND_TWIN(ncclReduce);
  SCCL_BIND_TWIN(ncclBcast);
  SCCL_BIND_TWIN(ncclBroadcast);
  SCCL_BIND_TWIN(ncclReduceScatter);
  SCCL_BIND_TWIN(ncclAllGather);
  SCCL_BIND_TWIN(ncclAlltoAll);
  SCCL_BIND_TWIN(ncclGather);
  SCCL_BIND_TWIN(ncclScatter);
  SCCL_BIND_TWIN(ncclSend);
  SCCL_BIND_TWIN(ncclRecv);
  SCCL_BIND_TWIN(ncclGroupStart);
  SCCL_BIND_TWIN(ncclGroupEnd);
  SCCL_BIND_TWIN(ncclGroupSimulateEnd);
  // Deprecated and without a twin: its plain name.
  bind(handle, "ncclResetDebugInit", &api.ncclResetDebugInit);
  return api;
}

#undef SCCL_BIND_TWIN

}  // namespace sketchccl::interpose
