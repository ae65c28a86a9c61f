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

// The facts of codec C at compile time (kernels/codecs.def), for the dispatch of both builds.
template <CodecId C>
struct CodecTag {
  static constexpr CodecInfo info = kCodecs[int(C)];
};
// f(CodecTag<c>()) for the row of c, so that a driver picks its routines with `if constexpr` on
// the codec's family, bits and wire type and every codec of the table gets its instantiation;
// false for an id outside the table.
template <typename F>
bool with_codec(CodecId c, F&& f) {
  switch (c) {
#define SCCL_CODEC(id, ...)     \
  case CodecId::id:             \
    f(CodecTag<CodecId::id>()); \
    return true;
#include "kernels/codecs.def"
#undef SCCL_CODEC
  }
  return false;
}

}  // namespace sketchccl::kernels::detail
