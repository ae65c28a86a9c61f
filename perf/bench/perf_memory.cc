#include "perf/bench/perf_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "perf/bench/perf_inputs.h"
#include "perf/bench/perf_nccl.h"

namespace perfbench {
namespace {

using perfinputs::input_error;

class HostMemory : public Memory {
 public:
  explicit HostMemory(int rank) : rank_(rank) {}
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 64)) != 0)
      out_of_memory(rank_, "a host buffer", bytes);
    std::memset(p, 0, std::max<size_t>(bytes, 64));
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  cudaStream_t stream() override { return nullptr; }
  void sync() override {}
  const char* name() const override { return "host"; }

 private:
  int rank_;
};

class DeviceMemory : public Memory {
 public:
  explicit DeviceMemory(int local_rank) {
    void* h = dlopen("libcudart.so", RTLD_NOW);
    if (h == nullptr) h = dlopen("libcudart.so.12", RTLD_NOW);
    if (h == nullptr) h = dlopen("libcudart.so.13", RTLD_NOW);
    if (h == nullptr) input_error("--memory device: cannot load the CUDA runtime (libcudart.so)");
    resolve(h, "cudaGetDeviceCount", &get_count_);
    resolve(h, "cudaSetDevice", &set_device_);
    resolve(h, "cudaMalloc", &malloc_);
    resolve(h, "cudaFree", &free_);
    resolve(h, "cudaMemcpy", &memcpy_);
    resolve(h, "cudaStreamCreate", &stream_create_);
    resolve(h, "cudaStreamSynchronize", &stream_sync_);
    int n = 0;
    if (get_count_(&n) != 0 || n == 0) input_error("--memory device: no CUDA device");
    check(set_device_(local_rank % n), "cudaSetDevice");
    check(stream_create_(&stream_), "cudaStreamCreate");
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(malloc_(&p, std::max<size_t>(bytes, 64)), "cudaMalloc");
    return p;
  }
  void release(void* p) override { free_(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(memcpy_(dst, src, bytes, 1), "cudaMemcpy H2D");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(memcpy_(dst, src, bytes, 2), "cudaMemcpy D2H");
  }
  cudaStream_t stream() override { return stream_; }
  void sync() override { check(stream_sync_(stream_), "cudaStreamSynchronize"); }
  const char* name() const override { return "device"; }

 private:
  static void check(int rc, const char* what) {
    if (rc != 0) input_error("%s failed (cudaError %d)", what, rc);
  }
  int (*get_count_)(int*) = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;
  int (*stream_create_)(cudaStream_t*) = nullptr;
  int (*stream_sync_)(cudaStream_t) = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Memory> make_memory(bool device, int rank, int local_rank) {
  if (device) return std::make_unique<DeviceMemory>(local_rank);
  return std::make_unique<HostMemory>(rank);
}

void out_of_memory(int rank, const char* what, size_t bytes) {
  std::fprintf(stderr, "sketchccl-perf: rank %d: out of memory allocating %s (%zu bytes)\n", rank,
               what, bytes);
  std::exit(3);
}

}  // namespace perfbench
