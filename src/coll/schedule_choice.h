// The data schedule of a compressed reduction (SKETCHCCL_ALGO, docs/scale.md): the ring, or
// two-shot (two_shot.h), from numbers every rank holds alike (the settings, P, the count, the
// codec, whether the buffers' backend keeps fp32 sums), so every rank picks the same.
#pragma once

#include <cstddef>

#include "kernels/codec.h"
#include "src/coll/ring_shape.h"
#include "src/coll/settings.h"

namespace sketchccl::coll {

// Two-shot can run the codec: a quantizing one (the linear and CASQ families, lossy) on a backend
// with sums. Others always run the ring (exact codecs gain nothing; s2 and `sparse` have plans of
// their own).
bool two_shot_applies(kernels::CodecId codec, bool backend_sums);

// What `auto` (and a forced schedule) gives for a call of `count` elements among `nranks`.
Schedule choose_schedule(const Settings& s, kernels::CodecId codec, int nranks, size_t count,
                         bool backend_sums);

}  // namespace sketchccl::coll
