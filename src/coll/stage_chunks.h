// How a staged reduction's copies are cut and ordered (docs/cuda.md, "Chunks"), on the caller's
// thread before anything is enqueued: chunks of SKETCHCCL_STAGE_CHUNK_BYTES (at most
// backend::kMaxStagingChunks), the input copied in the order this rank's ring first reads it
// (slice by slice, from the chunk it encodes first), the result waited for and copied back in the
// order the ring's lanes finish it. The order only makes the pipeline faster: any order gives the
// same bytes (the engine waits for whichever chunk it reads).
#pragma once

#include <cstddef>

#include "src/backend/device_staging.h"
#include "src/coll/reduction.h"

namespace sketchccl::coll {

// A flat AllReduce or ReduceScatter of `count` elements of `esz` bytes at `rank` of `nranks`
// (out_bytes: its result's); any other kind: one chunk each way.
backend::StagingChunks reduction_chunks(CallKind kind, size_t count, size_t esz, size_t out_bytes,
                                        int rank, int nranks, size_t slice_elems, size_t min_chunk);

}  // namespace sketchccl::coll
