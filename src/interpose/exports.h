// Exporting an NCCL API function: pncclX is the definition, ncclX an alias of it, both visible,
// as the real libnccl.so.2 exports them. No exception may cross this boundary.
#pragma once

#define SCCL_NCCL_API(ret, name, ...)                                                        \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                \
  extern "C" __attribute__((visibility("default"), alias("p" #name))) ret name(__VA_ARGS__); \
  extern "C" ret p##name(__VA_ARGS__)

// Wraps a body so that nothing it throws escapes into the caller's C code.
#define SCCL_API_GUARD(api, ...)                                                              \
  try {                                                                                       \
    __VA_ARGS__                                                                               \
  } catch (const std::bad_alloc&) {                                                           \
    return ::sketchccl::interpose::report(                                                    \
        ::sketchccl::Status(::sketchccl::Code::kSystemError, "out of memory"), api);          \
  } catch (...) {                                                                             \
    return ::sketchccl::interpose::report(                                                    \
        ::sketchccl::Status(::sketchccl::Code::kInternalError, "unexpected exception"), api); \
  }
