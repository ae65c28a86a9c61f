// Full-precision sums of decoded packets (the two-shot scheme, docs/engine.md): a reduced slice
// whose contributions were each quantized once is their fp32 sum, in a fixed order. Written on
// the codec contract (decode), so it follows whatever the codecs' arithmetic is.
#pragma once

#include <cstddef>

#include "kernels/codec.h"

namespace sketchccl::kernels {

// sum[i] += decode(pkt)[i] for i < n (scale 1). Validates the packet like decode.
Status decode_add(const CodecParams& p, const void* pkt, size_t pkt_bytes, float* sum, size_t n);

}  // namespace sketchccl::kernels
