// What the emulator's own tests ask of it beyond the CUDA API.
#pragma once

#include <cuda_runtime_api.h>

namespace cudaemu {

// The hardware queue `stream` is mapped onto (-1 for an invalid stream).
int stream_queue(cudaStream_t stream);

}  // namespace cudaemu
