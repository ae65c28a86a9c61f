// Plain TCP transport: always built, no dependency. One connection per pair of ranks (the lower
// rank connects), messages framed as {magic, tag, length} + payload, unexpected messages
// buffered on the receiver.
#pragma once

#include <memory>

#include "transport/transport.h"

namespace sketchccl::transport {

Status create_socket_transport(const TransportOptions& opts, std::unique_ptr<Transport>* out);

}  // namespace sketchccl::transport
