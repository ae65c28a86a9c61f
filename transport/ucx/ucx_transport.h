// UCX transport: the UCP tag API, one worker per communicator (progressed by the owner's
// thread), endpoints in error handling mode PEER so a dead peer is reported. The sending rank
// rides in the top 64 - kUcxTagBits bits of the UCP tag.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace sketchccl::transport {

// Tag bits left to callers (TransportProperties::tag_bits); the sending rank takes the rest.
constexpr int kUcxTagBits = 44;
static_assert(kUcxTagBits > 0 && kUcxTagBits < 64, "the UCP tag must hold a rank and a tag");

Status create_ucx_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out);

}  // namespace sketchccl::transport
