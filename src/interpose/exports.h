// Exporting an NCCL API function: pncclX is the definition, ncclX an alias of it, both visible,
// as the real libnccl.so.2 exports them. Only declarations (the types are nccl.h's): the
// definition of pncclX follows as a plain function.
#pragma once

#define SCCL_NCCL_API(name)                                                      \
  extern "C" __attribute__((visibility("default"))) decltype(::p##name) p##name; \
  extern "C" __attribute__((visibility("default"), alias("p" #name))) decltype(::p##name) name
