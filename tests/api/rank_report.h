// The worker side of a multi-process NCCL test: what a rank prints for the driver to compare.
// Every check is one line "CASE <name> HASH <fnv1a of the output bytes> <OK|FAIL why>"; the
// driver (agreement.h) requires OK everywhere and the same HASH on every rank for a case.
#pragma once

#include <nccl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace sketchccl::testing {

inline int g_case_failures = 0;

inline uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The 128-byte id from the 256 hex digits the driver passes on the command line.
inline bool parse_id_hex(const char* hex, ncclUniqueId* id) {
  if (std::strlen(hex) != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// A worker's command line, `NAME SCENARIO RANK NRANKS ID_HEX [ARGS...]`: false (with a message)
// when malformed. Arms a 300 s alarm so that a worker never outlives a broken driver.
struct WorkerArgs {
  std::string scenario;
  int rank = 0;
  int nranks = 1;
  ncclUniqueId id{};
  std::vector<std::string> args;  // ARGS
};
inline bool parse_worker_args(int argc, char** argv, WorkerArgs* out) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s SCENARIO RANK NRANKS ID_HEX [ARGS...]\n", argv[0]);
    return false;
  }
  alarm(300);
  out->scenario = argv[1];
  out->rank = std::atoi(argv[2]);
  out->nranks = std::atoi(argv[3]);
  if (!parse_id_hex(argv[4], &out->id)) {
    std::fprintf(stderr, "bad id\n");
    return false;
  }
  out->args.assign(argv + 5, argv + argc);
  return true;
}

inline void report_case(const std::string& name, const void* out, size_t bytes,
                        const std::string& verdict) {
  if (verdict != "OK") g_case_failures++;
  std::printf("CASE %s HASH %016llx %s\n", name.c_str(),
              static_cast<unsigned long long>(fnv1a(out, bytes)), verdict.c_str());
  std::fflush(stdout);
}

// Rank r's input element i, from (data, r, i) alone so every rank can compute the exact sum.
// "int": small integers (every sum exact in fp32, inputs exact in fp16/bf16); "sparse": 1% of
// positions non-zero, integers; "gauss": smooth values.
inline float input_value(const std::string& data, int r, size_t i) {
  uint64_t h = (static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  if (data == "sparse") {
    if (h % 100 != 0) return 0.0f;
    return static_cast<float>(static_cast<int>((h >> 20) % 15) - 7 + ((h >> 40) % 2 ? 8 : -8));
  }
  if (data == "gauss") {
    double u1 = ((h >> 11) + 1.0) / 9007199254740993.0, u2 = ((h * 31) >> 11) / 9007199254740992.0;
    return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return static_cast<float>(static_cast<int>(h % 17) - 8);
}

// The NMSE each codec is held to on a ring of up to 8 ranks (fp32 output), from the bounds
// measured in docs/codecs.md with margin.
inline double codec_nmse_bound(const std::string& codec) {
  return codec == "none" || codec == "sparse" ? 0
         : codec == "bf16"                    ? 1e-4
         : codec == "fp16"                    ? 1e-5
         : codec == "q8" || codec == "q8r"    ? 1e-3
         : codec == "q4" || codec == "q4r"    ? 0.15
         : codec == "q2" || codec == "q2r"    ? 3.5
         : codec == "casq2"                   ? 8.0  // unbiased: 7.07 on Laplace x8 (codecs.md)
         : codec == "casq3"                   ? 1.0
         : codec == "casq4"                   ? 0.2
         : codec == "s2"                      ? 1e-3
                                              : 1e-3;  // auto: q8 or sparse
}

}  // namespace sketchccl::testing

// A call that must succeed: on failure the rank prints a FAIL case and exits.
#define NCCL_OK(call)                                                                     \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      std::printf("CASE call HASH 0 FAIL %s -> %s (%s)\n", #call, ncclGetErrorString(r_), \
                  ncclGetLastError(nullptr));                                             \
      std::fflush(stdout);                                                                \
      std::exit(3);                                                                       \
    }                                                                                     \
  } while (0)
