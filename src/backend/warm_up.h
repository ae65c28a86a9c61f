// Every codec (encode, step, decode), the sparse helpers and error feedback once on a backend,
// for every element type: the CUDA backend runs it when it is created, on the caller's thread
// before any stream is held, so that no kernel is first loaded under a held stream (a module
// load may synchronize the context: a permanent hang). Any backend runs it; the host backend's run
// is the CPU test that the sequence itself is valid (tests/gpu/nodevice_test.cc).
#pragma once

#include <cstddef>

#include "src/backend/backend.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// The elements the warm-up uses; its buffers hold this many floats.
constexpr size_t kWarmUpElems = 4096;

// `x` and `y`: kWarmUpElems floats of the backend's memory; x holds finite non-zero values in
// every element type (e.g. every byte 0x3c), y is overwritten.
Status warm_up_backend(Backend& be, void* x, void* y);

}  // namespace sketchccl::backend
