// UCX transport: the UCP tag API, one worker per communicator (progressed by the owner's
// thread), endpoints in error handling mode PEER so a dead peer is reported. The sending rank
// rides in the top 64 - kUcxTagBits bits of the UCP tag.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace sketchccl::transport {

Status create_ucx_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out);

}  // namespace sketchccl::transport
