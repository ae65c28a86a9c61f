// Host-side helpers shared by the CPU build (kernels/host/) and the CUDA wrappers
// (kernels/cuda/): parameter checks, packet sizes and expected headers. Not for other layers.
#pragma once

#include "kernels/codec.h"
#include "kernels/codec_common.h"

namespace sketchccl::kernels::detail {

// Parameters and n as given by the caller (not from a packet).
Status check_params(const CodecParams& p, size_t n);
// packet_bytes without the checks.
size_t bytes_unchecked(const CodecParams& p, size_t n);
// The header a packet for (p, n) carries.
PacketHeader expected_header(const CodecParams& p, size_t n);

}  // namespace sketchccl::kernels::detail
