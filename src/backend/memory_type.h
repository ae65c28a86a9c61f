// Where a user buffer lives. The interposer classifies a call's buffers once and the type travels
// with the call down to the backend that runs it (as UCP's request parameters carry it); nothing
// below the front guesses it again.
#pragma once

namespace sketchccl::backend {

enum class MemoryType {
  kHost,    // host memory: the host backend
  kDevice,  // device memory of the communicator's device: the CUDA backend, stream-ordered
};

inline const char* memory_type_name(MemoryType m) {
  return m == MemoryType::kDevice ? "device" : "host";
}

}  // namespace sketchccl::backend
