// Where a user buffer lives. The interposer classifies a call's buffers once and the type travels
// with the call down to the backend that runs it (as UCP's request parameters carry it); nothing
// below the front guesses it again.
#pragma once

namespace sketchccl::backend {

enum class MemoryType {
  kHost,  // pageable host memory: the host backend, on the buffers themselves
  // Stream-ordered memory (the communicator's device's, or page-locked host memory): the call is
  // staged on the caller's stream (device_staging.h) and its codecs run on the staged copy.
  kDevice,
};

inline const char* memory_type_name(MemoryType m) {
  return m == MemoryType::kDevice ? "device" : "host";
}

}  // namespace sketchccl::backend
