// Calling the real NCCL's twin of an exported function, with the caller's arguments.
#pragma once

#include "interpose/runtime.h"

namespace sketchccl::interpose {

template <typename Fn>
Fn real_fn(const char* name) {
  return reinterpret_cast<Fn>(Runtime::get().real_symbol(name));
}

}  // namespace sketchccl::interpose

// In front of a real NCCL: hand the call to pncclX unchanged and return its result.
// `args` is the parenthesised argument list.
#define SCCL_FORWARD(name, args)                                                  \
  do {                                                                            \
    if (!::sketchccl::interpose::Runtime::get().standalone()) {                   \
      auto real = ::sketchccl::interpose::real_fn<decltype(&p##name)>("p" #name); \
      if (real == nullptr) return ::sketchccl::interpose::missing_real(#name);    \
      return ::sketchccl::interpose::forwarded(real args);                        \
    }                                                                             \
  } while (0)
