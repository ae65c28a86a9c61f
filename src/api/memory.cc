#include "src/api/memory.h"

#include <cstdint>

#include "src/api/coll_call.h"
#include "src/backend/cuda_query.h"

namespace sketchccl::api {

BufferMemory classify_buffers(const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes) {
  const backend::MemoryQuery s = backend::classify_memory(send, send_bytes);
  const backend::MemoryQuery r =
      recv == send ? s : backend::classify_memory(recv, recv_bytes);  // in place: asked once
  BufferMemory m;
  if (s.cls == backend::MemoryClass::kUnknown || r.cls == backend::MemoryClass::kUnknown) {
    m.known = false;
    m.why = s.cls == backend::MemoryClass::kUnknown ? s.why : r.why;
    return m;
  }
  // Device and page-locked memory are stream-ordered: both take the device path.
  const bool send_dev =
      s.cls == backend::MemoryClass::kDevice || s.cls == backend::MemoryClass::kPinned;
  const bool recv_dev =
      r.cls == backend::MemoryClass::kDevice || r.cls == backend::MemoryClass::kPinned;
  m.type = send_dev || recv_dev ? backend::MemoryType::kDevice : backend::MemoryType::kHost;
  m.mixed = send_dev != recv_dev;
  return m;
}

BufferMemory classify(const CollCall& call, int nranks) {
  return classify_buffers(call.send, nccl_bytes(call.type, input_count(call, nranks)), call.recv,
                          nccl_bytes(call.type, output_count(call, nranks)));
}

size_t nccl_bytes(ncclDataType_t type, size_t count) {
  size_t esz = 1;
  switch (type) {
    case ncclFloat16:
    case ncclBfloat16:
      esz = 2;
      break;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      esz = 4;
      break;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      esz = 8;
      break;
    default:
      break;
  }
  return count > SIZE_MAX / esz ? SIZE_MAX : count * esz;
}

}  // namespace sketchccl::api
