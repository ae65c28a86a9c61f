// A fiber: a stack and a saved register set that one OS thread switches into and out of, so that
// the threads of one CUDA block run interleaved on one queue thread. The switch is a few
// instructions of x86-64 assembly (no signal-mask syscall as swapcontext makes); the stack has a
// guard page below it, so an overflow faults instead of corrupting a neighbour. Switches are
// annotated for AddressSanitizer and ThreadSanitizer when the build uses them.
#pragma once

#include <cstddef>

namespace cudaemu::exec {

class Fiber {
 public:
  using Entry = void (*)(Fiber*);

  // A fiber that calls entry(this) on its first resume(); entry must never return.
  Fiber(std::size_t stack_bytes, Entry entry);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // From the owning thread: runs the fiber until it calls suspend().
  void resume();
  // From inside the fiber: back to the resume() that ran it.
  void suspend();
  // Called first thing by the entry function (completes the sanitizers' switch bookkeeping).
  void started();

  void* user = nullptr;  // the executor's per-fiber state

 private:
  void* sp_ = nullptr;         // the fiber's saved stack pointer while it is suspended
  void* caller_sp_ = nullptr;  // resume()'s saved stack pointer while the fiber runs
  char* map_ = nullptr;        // guard page + stack
  std::size_t map_bytes_ = 0;
  char* stack_lo_ = nullptr;
  std::size_t stack_bytes_ = 0;

 public:
  // Sanitizer bookkeeping (unused in a build without sanitizers, hence not private).
  void* fake_stack_ = nullptr;
  const void* caller_stack_lo_ = nullptr;
  std::size_t caller_stack_bytes_ = 0;
  void* tsan_fiber_ = nullptr;
  void* tsan_caller_ = nullptr;
};

// The stack size of a kernel thread: $CUDAEMU_FIBER_STACK (bytes) if set, else 64 KiB (256 KiB
// under AddressSanitizer, whose instrumented frames are larger).
std::size_t fiber_stack_bytes();

}  // namespace cudaemu::exec
