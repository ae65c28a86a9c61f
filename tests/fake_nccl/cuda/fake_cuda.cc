// A fake libcuda.so.1 for the memory-classification tests (no GPU here): cuPointerGetAttribute
// answers "device" or fails for ranges the test marks with fake_cuda_mark, and says "not a CUDA
// pointer" (CUDA_ERROR_INVALID_VALUE) for everything else, as the driver does for host memory.
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace {

struct Range {
  uintptr_t lo = 0, hi = 0;
  int answer = 0;
};
std::mutex g_mu;
Range g_ranges[16];
int g_count = 0;

}  // namespace

// answer: 2 (CU_MEMORYTYPE_DEVICE) or a CUresult error code (such as 999, CUDA_ERROR_UNKNOWN).
extern "C" __attribute__((visibility("default"))) void fake_cuda_mark(const void* p, size_t bytes,
                                                                      int answer) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_count == 16) return;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  g_ranges[g_count++] = {lo, lo + bytes, answer};
}

extern "C" __attribute__((visibility("default"))) int cuPointerGetAttribute(
    void* data, int attribute, unsigned long long ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < g_count; ++i) {
    const Range& r = g_ranges[i];
    if (ptr < r.lo || ptr >= r.hi) continue;
    if (r.answer != 2) return r.answer;
    if (attribute == 2) *static_cast<unsigned*>(data) = 2;  // MEMORY_TYPE: device
    if (attribute == 8) *static_cast<unsigned*>(data) = 0;  // IS_MANAGED: no
    return 0;
  }
  return 1;  // CUDA_ERROR_INVALID_VALUE: not memory CUDA knows
}
