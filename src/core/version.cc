// The exported version query.
#include <sketchccl/sketchccl.h>
#include "sketchccl_build_config.h"

extern "C" int sketchcclGetVersion(void) {
  return SKETCHCCL_VERSION_MAJOR * 10000 + SKETCHCCL_VERSION_MINOR * 100 + SKETCHCCL_VERSION_PATCH;
}

extern "C" const char* sketchcclGetVersionString(void) {
  return SKETCHCCL_VERSION_STRING;
}
