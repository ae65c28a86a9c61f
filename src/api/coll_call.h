// One collective or point-to-point call, as the export received it: the descriptor every stage
// reads (policy, validation, the per-call log, group deferral, forwarding, submission), as
// NCCL's own ncclInfo is. Built once by the export (nccl_api.def), never rebuilt.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "kernels/codec.h"
#include "src/api/memory.h"
#include "src/api/nccl_compat.h"

namespace sketchccl::api {

// NCCL's collectives and point-to-point calls, one per row of nccl_api.def.
enum class CollKind {
#define SCCL_NCCL_COLL(name, kind, since, params, call, real) k##kind,
#include "src/api/nccl_api.def"
};

struct CollCall {
  CollKind kind = CollKind::kAllReduce;
  const char* api = "";        // NCCL's function name: "ncclAllReduce"
  const void* send = nullptr;  // NULL for ncclRecv; ncclBcast's buff is both send and recv
  void* recv = nullptr;        // NULL for ncclSend
  size_t count = 0;            // as NCCL names it: recvcount for ReduceScatter, sendcount for
                               // AllGather, elements per rank for AlltoAll, Gather, Scatter
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;  // the reductions' (AllReduce, Reduce, ReduceScatter); else ncclSum
  int root = 0;              // root, or the peer of Send/Recv; 0 where the call has none
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  // The nccl*Config variant (NCCL 2.31) was called: forwarded to its own twin with `config`,
  // which may be NULL (the plain call's behaviour) and is read only through coll_config.h.
  bool with_config = false;
  const ncclCollConfig_t* config = nullptr;
  // Set once by the front that runs the call itself, never by the export:
  BufferMemory mem;  // where the buffers live, asked of CUDA once
  // The element type the codecs compute in (kernels' own enum: kernels knows no NCCL type).
  kernels::ElemType elem = kernels::ElemType::kF32;
  // A *Config call's codec option (coll_config.h), set by the front that read the config.
  bool has_codec = false;
  kernels::CodecId codec = kernels::CodecId::kNone;

  // NCCL's spelling in its log lines: "AllReduce".
  const char* name() const { return api + 4; }
};

// The CollCall of one export (nccl_api.def's `call` column, then comm and stream).
inline CollCall make_call(CollKind kind, const char* api, const void* send, void* recv,
                          size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  CollCall c;
  c.kind = kind;
  c.api = api;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.type = type;
  c.op = op;
  c.root = root;
  c.comm = comm;
  c.stream = stream;
  return c;
}

// The CollCall of one nccl*Config export: as make_call, plus its config.
inline CollCall make_config_call(CollKind kind, const char* api, const void* send, void* recv,
                                 size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                                 ncclComm_t comm, cudaStream_t stream,
                                 const ncclCollConfig_t* config) {
  CollCall c = make_call(kind, api, send, recv, count, type, op, root, comm, stream);
  c.with_config = true;
  c.config = config;
  return c;
}

// The calls that reduce (and so have an op).
bool reduces(CollKind kind);
// The calls SketchCCL's compressed ring runs (AllReduce, ReduceScatter).
bool compressible(CollKind kind);

// Elements of an AllGather's output: nranks · sendcount (saturated as input_count); count for
// the reductions.
size_t output_count(const CollCall& call, int nranks);

// Elements of a compressible call's input: count for AllReduce, nranks · recvcount for
// ReduceScatter (saturated, so that its bytes in any type cannot overflow; the validation
// refuses such a call). Its output is count elements either way.
size_t input_count(const CollCall& call, int nranks);

}  // namespace sketchccl::api
