#include "src/api/coll_call.h"

#include <cstdint>

namespace sketchccl::api {

bool reduces(CollKind kind) {
  return kind == CollKind::kAllReduce || kind == CollKind::kReduce ||
         kind == CollKind::kReduceScatter;
}

bool compressible(CollKind kind) {
  return kind == CollKind::kAllReduce || kind == CollKind::kReduceScatter;
}

size_t input_count(const CollCall& call, int nranks) {
  if (call.kind != CollKind::kReduceScatter) return call.count;
  const auto p = static_cast<size_t>(nranks < 1 ? 1 : nranks);
  return call.count <= SIZE_MAX / p ? call.count * p : SIZE_MAX / 4;
}

size_t output_count(const CollCall& call, int nranks) {
  if (call.kind != CollKind::kAllGather) return call.count;
  const auto p = static_cast<size_t>(nranks < 1 ? 1 : nranks);
  return call.count <= SIZE_MAX / p ? call.count * p : SIZE_MAX / 4;
}

}  // namespace sketchccl::api
