// Every kernel instantiation the library may launch, listed next to its definition, so that the
// CUDA backend can load them all (cudaFuncGetAttributes) when it is created, on the caller's
// thread and before any stream is held by the stream gate. With lazy module loading (the default
// since CUDA 12.2) a kernel's first launch loads its module, and a load may synchronize the
// context: a gated stream would then deadlock against the loader (docs/cuda.md, finding 1).
//
// To add a kernel: list every instantiation it is launched with in an SCCL_REGISTER_KERNELS block
// of the .cu file that defines it, e.g.
//   SCCL_REGISTER_KERNELS(linear, SCCL_KERNEL_REF(k_quant<8, 0>), SCCL_KERNEL_REF(k_cast<0, 1>));
// A kernel missing here still works, but loads at its first launch (the risk above).
// Header only: no CUDA type appears here, so host C++ (src/backend, tests) reads the list too.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <mutex>
#include <vector>

namespace sketchccl::kernels::cuda {

// A kernel's host-side handle (what cudaFuncGetAttributes and cudaLaunchKernel take) and its name.
struct KernelRef {
  const void* fn;
  const char* name;
};

class KernelRegistry {
 public:
  static KernelRegistry& get() {
    static auto* r = new KernelRegistry();  // never destroyed: read until the process ends
    return *r;
  }
  void add(const KernelRef& k) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const KernelRef& have : list_) {
      if (have.fn == k.fn) return;
    }
    list_.push_back(k);
  }
  std::vector<KernelRef> list() const {
    std::lock_guard<std::mutex> lock(mu_);
    return list_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<KernelRef> list_;
};

// Registers its kernels during static initialization of the object file that defines them.
struct KernelRegistrar {
  KernelRegistrar(std::initializer_list<KernelRef> kernels) {
    for (const KernelRef& k : kernels)
      KernelRegistry::get().add(k);
  }
};

}  // namespace sketchccl::kernels::cuda

// One instantiation, e.g. SCCL_KERNEL_REF(k_quant<8, 0>).
#define SCCL_KERNEL_REF(...)                                  \
  ::sketchccl::kernels::cuda::KernelRef {                     \
    reinterpret_cast<const void*>(&__VA_ARGS__), #__VA_ARGS__ \
  }
// A block of instantiations; `tag` names the block (unique within its file).
#define SCCL_REGISTER_KERNELS(tag, ...)                                         \
  static const ::sketchccl::kernels::cuda::KernelRegistrar sccl_kernels_##tag { \
    __VA_ARGS__                                                                 \
  }
