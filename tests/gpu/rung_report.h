// What a GPU test worker reports after its calls (tests/gpu): which rung ran them
// (SKETCHCCL_DEVICE_CODECS, docs/cuda.md) and that the proxy made no CUDA call, from the
// communicator's statistics. GPU_TEST_RUNG (the driver's expectation): "2", some call ran its
// codecs on the caller's stream; "1", none did; unset, either.
#pragma once

#include <nccl.h>

#include <cstdlib>
#include <string>

#include "include/sketchccl/sketchccl.h"
#include "tests/api/rank_report.h"

namespace sketchccl::testing {

inline void report_rung(ncclComm_t comm) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  std::string verdict = "OK";
  const char* want = std::getenv("GPU_TEST_RUNG");
  const std::string rung = want != nullptr ? want : "";
  if (sketchcclCommGetStats(comm, &s) != 0) {
    verdict = "FAIL sketchcclCommGetStats";
  } else if (s.proxy_cuda_calls != 0) {
    verdict = "FAIL the proxy made " + std::to_string(s.proxy_cuda_calls) + " CUDA calls";
  } else if (rung == "2" && s.device_codec_calls == 0) {
    verdict = "FAIL no call ran its codecs on the caller's stream (device_codec_calls 0)";
  } else if (rung == "1" && s.device_codec_calls != 0) {
    verdict = "FAIL " + std::to_string(s.device_codec_calls) + " calls ran the second rung";
  }
  report_case("rung", "rung", 4, verdict);
}

}  // namespace sketchccl::testing
