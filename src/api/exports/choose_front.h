// The front of this process, chosen once, at the first call: in front of the real NCCL when one
// was loaded (src/interpose/), else standalone (src/standalone/). No export asks again.
#pragma once

#include "src/api/front.h"

namespace sketchccl::api {

Front& front();

}  // namespace sketchccl::api
