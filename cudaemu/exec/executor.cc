// The kernel executor: runs a grid on the calling (queue) thread, one block at a time, each
// block's threads as fibers switched at the block barrier, the warp collectives and __nanosleep.
// Warp collectives are lock-step: every existing lane named in the mask arrives with that mask,
// then every lane reads the values as they were at arrival. A block in which no thread can go on
// (a lane missing from a collective, a barrier some thread never reaches) is a device fault, not
// a hang.
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fiber.h"

#pragma GCC visibility push(default)
#include "cudaemu/device.h"
#include "cudaemu/work.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace cudaemu {
namespace exec {
namespace {

enum class State : std::uint8_t { kReady, kBarrier, kWarp, kSleep, kDone };

struct GpuThread {
  Fiber* fiber = nullptr;
  uint3 idx{};
  int lane = 0;
  int warp = 0;
  State state = State::kReady;
  bool started = false;
  // The warp collective it waits in.
  int op = 0;
  unsigned mask = 0;
  unsigned long long value = 0;
  int param = 0;
  int width = 32;
  unsigned long long result = 0;
  // The barrier's outcome: predicates set and threads arrived.
  int count = 0;
  int arrived = 0;
  unsigned sleep_ns = 0;
};

struct BlockRun {
  const std::function<void()>* body = nullptr;
  const char* kernel = "";
  std::vector<GpuThread> threads;
  int live = 0;
  int barrier_arrived = 0;
  int barrier_count = 0;
  bool cancel = false;
  bool fault = false;
  bool polled = false;
  std::exception_ptr error;
  unsigned char* dynamic_shared = nullptr;
  std::vector<unsigned> warp_waiting;  // per warp: the lanes waiting in a collective
  std::uintptr_t valid_lo = 0;         // a device range check_access found valid in this grid
  std::uintptr_t valid_hi = 0;
};

struct FiberCancel {};

thread_local BlockRun* t_block = nullptr;
thread_local GpuThread* t_self = nullptr;
thread_local std::vector<std::unique_ptr<Fiber>> t_pool;

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};
thread_local std::unique_ptr<unsigned char, AlignedFree> t_dynamic;
thread_local std::size_t t_dynamic_bytes = 0;

void fiber_main(Fiber* f) {
  f->started();
  for (;;) {
    GpuThread* me = t_self;
    BlockRun* b = t_block;
    bool faulted = false;
    try {
      (*b->body)();
    } catch (const DeviceFaultStop&) {
      faulted = true;
    } catch (const FiberCancel&) {
    } catch (...) {
      b->error = std::current_exception();
    }
    if (faulted) b->fault = true;
    me->state = State::kDone;
    f->suspend();
  }
}

void run_thread(GpuThread& t) {
  t_self = &t;
  threadIdx = t.idx;
  t.started = true;
  t.fiber->resume();
}

// Releases the block barrier once every thread still running has arrived.
void try_release_barrier(BlockRun& b) {
  if (b.barrier_arrived == 0 || b.barrier_arrived != b.live) return;
  for (GpuThread& t : b.threads) {
    if (t.state == State::kBarrier) {
      t.count = b.barrier_count;
      t.arrived = b.barrier_arrived;
      t.state = State::kReady;
    }
  }
  b.barrier_arrived = 0;
  b.barrier_count = 0;
}

int segment_source(int op, int lane, int param, int width) {
  const int seg = lane & ~(width - 1);
  switch (op) {
    case dev::kShfl:
      return seg + (((param % width) + width) % width);
    case dev::kShflUp:
      return (lane - seg) < param ? lane : lane - param;
    case dev::kShflDown:
      return (lane - seg) + param >= width ? lane : lane + param;
    case dev::kShflXor: {
      const int src = lane ^ param;
      return (src < 0 || src >= 32 || src >= seg + width) ? lane : src;
    }
    default:
      return lane;
  }
}

// Completes warp `w`'s collective on `mask` once every existing lane it names waits in it.
void try_release_warp(BlockRun& b, int w, unsigned mask) {
  const int n = int(b.threads.size());
  const int lanes = std::min(32, n - w * 32);
  const unsigned need = mask & (lanes == 32 ? ~0u : (1u << lanes) - 1);
  // Cheap test first: not every lane named has reached a collective yet.
  if ((b.warp_waiting[std::size_t(w)] & need) != need) return;
  unsigned present = 0;
  unsigned votes = 0;
  unsigned long long values[32] = {};
  for (int lane = 0; lane < 32; ++lane) {
    if (!(mask & (1u << lane))) continue;
    const int i = w * 32 + lane;
    if (i >= n) continue;  // lanes past the block's last thread do not exist
    const GpuThread& t = b.threads[std::size_t(i)];
    if (t.state != State::kWarp || t.mask != mask) return;
    present |= 1u << lane;
    values[lane] = t.value;
    if (t.value) votes |= 1u << lane;
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (!(present & (1u << lane))) continue;
    GpuThread& t = b.threads[std::size_t(w * 32 + lane)];
    switch (t.op) {
      case dev::kBallot:
        t.result = votes;
        break;
      case dev::kAny:
        t.result = votes != 0;
        break;
      case dev::kAll:
        t.result = votes == present;
        break;
      case dev::kSyncWarp:
        t.result = 0;
        break;
      default: {
        const int src = segment_source(t.op, lane, t.param, t.width);
        t.result = (present & (1u << src)) ? values[src] : values[lane];
      }
    }
    t.state = State::kReady;
  }
  b.warp_waiting[std::size_t(w)] &= ~present;
}

// Suspends the calling kernel thread until the scheduler resumes it; unwinds it on cancel.
void wait_turn(GpuThread* me, BlockRun* b) {
  me->fiber->suspend();
  if (b->cancel) throw FiberCancel{};
}

[[noreturn]] void fault_here(cudaError_t e, const char* what) {
  char msg[512];
  std::snprintf(msg, sizeof msg, "%s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", what,
                t_block ? t_block->kernel : "?", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
                threadIdx.y, threadIdx.z);
  device_fault(e, msg);
}

// Unwinds every started, unfinished thread of the block (their fibers go back to the pool).
void cancel_block(BlockRun& b) {
  b.cancel = true;
  for (GpuThread& t : b.threads) {
    if (t.started && t.state != State::kDone) run_thread(t);
  }
}

std::string describe_stuck(const BlockRun& b) {
  int in_barrier = 0;
  std::string warps;
  for (const GpuThread& t : b.threads) {
    if (t.state == State::kBarrier) ++in_barrier;
  }
  const int n = int(b.threads.size());
  for (int w = 0; w * 32 < n && warps.size() < 300; ++w) {
    for (int lane = 0; lane < 32 && w * 32 + lane < n; ++lane) {
      const GpuThread& t = b.threads[std::size_t(w * 32 + lane)];
      if (t.state != State::kWarp) continue;
      unsigned missing = 0;
      for (int l = 0; l < 32 && w * 32 + l < n; ++l) {
        const GpuThread& o = b.threads[std::size_t(w * 32 + l)];
        if ((t.mask & (1u << l)) && (o.state != State::kWarp || o.mask != t.mask)) {
          missing |= 1u << l;
        }
      }
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "; warp %d waits in a collective on mask 0x%08x, lanes 0x%08x never join it", w,
                    t.mask, missing);
      warps += buf;
      break;
    }
  }
  char head[160];
  std::snprintf(head, sizeof head,
                "deadlock: no thread of the block can go on (%d of %d live, %d at __syncthreads)",
                b.live, n, in_barrier);
  return head + warps;
}

// A block whose every thread sleeps: the queue thread sleeps the shortest request, doubled for
// each idle pass in a row up to 200 us, so that a kernel polling host memory costs little CPU.
void sleep_idle(unsigned ns, int idle_passes) {
  const unsigned long long want = (unsigned long long)std::max(ns, 1000u)
                                  << std::min(idle_passes, 8);
  timespec ts{0, long(std::min(want, 200000ull))};
  ::nanosleep(&ts, nullptr);
}

void run_block(BlockRun& b) {
  int idle_passes = 0;
  for (;;) {
    bool ran = false;
    bool progress = false;
    unsigned shortest = ~0u;
    for (GpuThread& t : b.threads) {
      if (t.state != State::kReady && t.state != State::kSleep) continue;
      t.state = State::kReady;
      run_thread(t);
      ran = true;
      if (t.state == State::kSleep) {
        shortest = std::min(shortest, t.sleep_ns);
      } else {
        progress = true;
      }
      if (b.fault || b.error) {
        cancel_block(b);
        if (b.error) std::rethrow_exception(b.error);
        throw DeviceFaultStop{};
      }
      if (t.state == State::kDone) {
        --b.live;
        try_release_barrier(b);
      }
    }
    if (b.live == 0) return;
    if (!ran) {
      const std::string what = describe_stuck(b);
      cancel_block(b);
      char msg[768];
      std::snprintf(msg, sizeof msg, "%s in kernel %s, block (%u,%u,%u)", what.c_str(), b.kernel,
                    blockIdx.x, blockIdx.y, blockIdx.z);
      device_fault(cudaErrorLaunchTimeout, msg);
    }
    if (progress) {
      idle_passes = 0;
    } else {
      sleep_idle(shortest, idle_passes++);
    }
  }
}

GpuThread* self_or_fault(const char* what) {
  if (t_block == nullptr || t_self == nullptr) {
    std::fprintf(stderr, "cudaemu: %s called outside a kernel\n", what);
    std::abort();
  }
  return t_self;
}

}  // namespace
}  // namespace exec

cudaError_t check_shape(const LaunchShape& s) {
  const unsigned long long threads = (unsigned long long)s.block.x * s.block.y * s.block.z;
  if (s.block.x == 0 || s.block.y == 0 || s.block.z == 0 || s.block.x > 1024 || s.block.y > 1024 ||
      s.block.z > 64 || threads > 1024) {
    return cudaErrorInvalidConfiguration;
  }
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0 || s.grid.x > 0x7fffffffu ||
      s.grid.y > 65535 || s.grid.z > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  // Without cudaFuncSetAttribute(MaxDynamicSharedMemorySize), which nothing here calls, a block
  // gets at most 48 KiB of dynamic shared memory.
  if (s.dynamic_shared > (std::size_t(48) << 10)) return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

cudaError_t run_grid(const LaunchShape& shape, const char* kernel_name,
                     const std::function<void()>& body) {
  using namespace exec;
  const cudaError_t bad = check_shape(shape);
  if (bad != cudaSuccess) return bad;
  if (t_block != nullptr) return cudaErrorNotPermitted;  // a kernel cannot run a grid
  const int n = int(shape.block.x * shape.block.y * shape.block.z);
  while (t_pool.size() < std::size_t(n)) {
    t_pool.push_back(std::make_unique<Fiber>(fiber_stack_bytes(), &fiber_main));
  }
  if (shape.dynamic_shared > t_dynamic_bytes) {
    void* p = std::aligned_alloc(16, (shape.dynamic_shared + 15) / 16 * 16);
    if (p == nullptr) return cudaErrorMemoryAllocation;
    t_dynamic.reset(static_cast<unsigned char*>(p));
    t_dynamic_bytes = shape.dynamic_shared;
  }
  BlockRun b;
  b.body = &body;
  b.kernel = kernel_name;
  b.dynamic_shared = t_dynamic.get();
  b.threads.resize(std::size_t(n));
  b.warp_waiting.resize(std::size_t((n + 31) / 32));
  gridDim = shape.grid;
  blockDim = shape.block;
  struct Leave {
    ~Leave() {
      t_block = nullptr;
      t_self = nullptr;
    }
  } leave;
  t_block = &b;
  for (unsigned bz = 0; bz < shape.grid.z; ++bz) {
    for (unsigned by = 0; by < shape.grid.y; ++by) {
      for (unsigned bx = 0; bx < shape.grid.x; ++bx) {
        blockIdx = uint3{bx, by, bz};
        int i = 0;
        for (unsigned z = 0; z < shape.block.z; ++z) {
          for (unsigned y = 0; y < shape.block.y; ++y) {
            for (unsigned x = 0; x < shape.block.x; ++x, ++i) {
              GpuThread& t = b.threads[std::size_t(i)];
              t = GpuThread{};
              t.fiber = t_pool[std::size_t(i)].get();
              t.idx = uint3{x, y, z};
              t.lane = i % 32;
              t.warp = i / 32;
            }
          }
        }
        b.live = n;
        std::fill(b.warp_waiting.begin(), b.warp_waiting.end(), 0u);
        b.barrier_arrived = 0;
        b.barrier_count = 0;
        // Real shared memory starts with what the last block left: a pattern shows reads of it.
        if (shape.dynamic_shared) std::memset(b.dynamic_shared, 0xcd, shape.dynamic_shared);
        run_block(b);
      }
    }
  }
  return cudaSuccess;
}

namespace dev {

using exec::BlockRun;
using exec::GpuThread;
using exec::State;

int sync_block(int pred, int* arrived) {
  GpuThread* me = exec::self_or_fault("__syncthreads");
  BlockRun* b = exec::t_block;
  me->state = State::kBarrier;
  ++b->barrier_arrived;
  b->barrier_count += pred != 0;
  exec::try_release_barrier(*b);
  if (me->state == State::kBarrier) exec::wait_turn(me, b);
  *arrived = me->arrived;
  return me->count;
}

unsigned long long warp_op(int op, unsigned mask, unsigned long long value, int param, int width) {
  GpuThread* me = exec::self_or_fault("a warp intrinsic");
  BlockRun* b = exec::t_block;
  if (!(mask & (1u << me->lane))) {
    exec::fault_here(cudaErrorIllegalInstruction,
                     "a warp collective whose mask leaves out the calling lane");
  }
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    exec::fault_here(cudaErrorIllegalInstruction,
                     "a shuffle width that is not a power of 2 up to 32");
  }
  me->op = op;
  me->mask = mask;
  me->value = value;
  me->param = param;
  me->width = width;
  me->state = State::kWarp;
  b->warp_waiting[std::size_t(me->warp)] |= 1u << me->lane;
  exec::try_release_warp(*b, me->warp, mask);
  if (me->state == State::kWarp) exec::wait_turn(me, b);
  return me->result;
}

unsigned active_mask() {
  GpuThread* me = exec::self_or_fault("__activemask");
  const BlockRun* b = exec::t_block;
  unsigned m = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const std::size_t i = std::size_t(me->warp * 32 + lane);
    if (i < b->threads.size() && b->threads[i].state != State::kDone) m |= 1u << lane;
  }
  return m;
}

void nanosleep(unsigned ns) {
  GpuThread* me = exec::self_or_fault("__nanosleep");
  BlockRun* b = exec::t_block;
  if (!b->polled) {
    b->polled = true;
    note_device_waiting(true);
  }
  me->state = State::kSleep;
  me->sleep_ns = ns;
  exec::wait_turn(me, b);
}

void* dynamic_shared() {
  exec::self_or_fault("dynamic shared memory");
  return exec::t_block->dynamic_shared;
}

bool in_kernel() {
  return exec::t_block != nullptr && exec::t_self != nullptr;
}

void check_access(const void* p, std::size_t bytes, std::size_t align) {
  if (!in_kernel() || bytes == 0) return;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (align > 1 && (a & (align - 1)) != 0) {
    char what[128];
    std::snprintf(what, sizeof what, "misaligned %zu-byte access at %p", bytes, p);
    exec::fault_here(cudaErrorMisalignedAddress, what);
  }
  // Memory is not freed while a kernel runs (cudaFree waits for the device), so a range found
  // valid stays valid for the grid; asking for 64 KiB ahead spares a lookup per access.
  exec::BlockRun* b = exec::t_block;
  if (a >= b->valid_lo && a + bytes <= b->valid_hi) return;
  constexpr std::size_t kAhead = std::size_t(64) << 10;
  if (bytes < kAhead && device_range_valid(p, kAhead)) {
    b->valid_lo = a;
    b->valid_hi = a + kAhead;
    return;
  }
  if (!device_range_valid(p, bytes)) {
    char what[128];
    if (device_access_denied(p, bytes)) {
      std::snprintf(what, sizeof what,
                    "%zu-byte access at %p in a VMM mapping without device access (cuMemSetAccess)",
                    bytes, p);
    } else {
      std::snprintf(what, sizeof what, "%zu-byte access at %p outside every device allocation",
                    bytes, p);
    }
    exec::fault_here(cudaErrorIllegalAddress, what);
  }
  b->valid_lo = a;
  b->valid_hi = a + bytes;
}

void launch(const void* fn, const char* name, const LaunchShape& shape, cudaStream_t stream,
            std::function<void()> thread_body) {
  // A launch is a CUDA call: a releaser of host waits must not make it while a stream waits.
  releaser_check((std::string("launch of kernel ") + (name != nullptr ? name : "?")).c_str());
  const cudaError_t bad = check_shape(shape);
  if (bad != cudaSuccess) {
    set_last_error(bad);
    return;
  }
  load_function(fn, name);
  // enqueue keeps `what`: one lasting string per kernel name.
  static std::mutex names_mu;
  static std::set<std::string> names;
  const char* what;
  {
    std::lock_guard<std::mutex> lock(names_mu);
    what = names.insert(std::string("kernel ") + name).first->c_str();
  }
  enqueue(stream, what,
          [shape, name, body = std::move(thread_body)] { run_grid(shape, name, body); });
}

}  // namespace dev
}  // namespace cudaemu
#pragma GCC visibility pop
