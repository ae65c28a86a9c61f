#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDAEMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define CUDAEMU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(CUDAEMU_ASAN)
#define CUDAEMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(CUDAEMU_TSAN)
#define CUDAEMU_TSAN 1
#endif

#if defined(CUDAEMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(CUDAEMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__)
#error "cudaemu's fibers switch with x86-64 assembly"
#endif

// cudaemu_fiber_switch(save, to): saves the callee-saved registers, MXCSR and the x87 control
// word on the current stack, stores the stack pointer in *save, and continues on `to`'s stack.
// cudaemu_fiber_start: a new fiber's first return address; calls r13(r12), which never returns.
asm(R"(
  .text
  .p2align 4
  .globl cudaemu_fiber_switch
  .hidden cudaemu_fiber_switch
  .type cudaemu_fiber_switch, @function
cudaemu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cudaemu_fiber_switch, .-cudaemu_fiber_switch

  .p2align 4
  .globl cudaemu_fiber_start
  .hidden cudaemu_fiber_start
  .type cudaemu_fiber_start, @function
cudaemu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size cudaemu_fiber_start, .-cudaemu_fiber_start
)");

extern "C" void cudaemu_fiber_switch(void** save, void* to);
extern "C" void cudaemu_fiber_start();

namespace cudaemu::exec {

std::size_t fiber_stack_bytes() {
  static const std::size_t bytes = [] {
    if (const char* s = std::getenv("CUDAEMU_FIBER_STACK")) {
      const long long v = std::atoll(s);
      if (v >= 16384) return std::size_t(v);
    }
#if defined(CUDAEMU_ASAN)
    return std::size_t(256) << 10;
#else
    return std::size_t(64) << 10;
#endif
  }();
  return bytes;
}

Fiber::Fiber(std::size_t stack_bytes, Entry entry) {
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  map_bytes_ = stack_bytes_ + page;
  void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "cudaemu: cannot map a %zu-byte fiber stack: %s\n", map_bytes_,
                 std::strerror(errno));
    std::abort();
  }
  map_ = static_cast<char*>(m);
  mprotect(map_, page, PROT_NONE);  // the guard page: an overflow faults here
  stack_lo_ = map_ + page;
  // The initial frame, as cudaemu_fiber_switch leaves one: control words, r15..rbp, and the
  // return address cudaemu_fiber_start, placed so that it starts with rsp 16-byte aligned.
  auto top = reinterpret_cast<std::uintptr_t>(stack_lo_ + stack_bytes_) & ~std::uintptr_t(15);
  auto* slot = reinterpret_cast<std::uint64_t*>(top - 24);  // the return address
  slot[0] = reinterpret_cast<std::uint64_t>(&cudaemu_fiber_start);
  slot[-1] = 0;                                       // rbp
  slot[-2] = 0;                                       // rbx
  slot[-3] = reinterpret_cast<std::uint64_t>(this);   // r12: the entry's argument
  slot[-4] = reinterpret_cast<std::uint64_t>(entry);  // r13: the entry
  slot[-5] = 0;                                       // r14
  slot[-6] = 0;                                       // r15
  std::uint32_t mxcsr = 0;
  std::uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  auto* ctl = reinterpret_cast<unsigned char*>(&slot[-7]);
  std::memcpy(ctl, &mxcsr, 4);
  std::memcpy(ctl + 4, &fpucw, 2);
  sp_ = &slot[-7];
#if defined(CUDAEMU_TSAN)
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if defined(CUDAEMU_TSAN)
  if (tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (map_) munmap(map_, map_bytes_);
}

void Fiber::resume() {
#if defined(CUDAEMU_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_lo_, stack_bytes_);
#endif
#if defined(CUDAEMU_TSAN)
  tsan_caller_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
  cudaemu_fiber_switch(&caller_sp_, sp_);
#if defined(CUDAEMU_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fiber::suspend() {
#if defined(CUDAEMU_ASAN)
  __sanitizer_start_switch_fiber(&fake_stack_, caller_stack_lo_, caller_stack_bytes_);
#endif
#if defined(CUDAEMU_TSAN)
  __tsan_switch_to_fiber(tsan_caller_, 0);
#endif
  cudaemu_fiber_switch(&sp_, caller_sp_);
#if defined(CUDAEMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack_, &caller_stack_lo_, &caller_stack_bytes_);
#endif
}

void Fiber::started() {
#if defined(CUDAEMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &caller_stack_lo_, &caller_stack_bytes_);
#endif
}

}  // namespace cudaemu::exec
