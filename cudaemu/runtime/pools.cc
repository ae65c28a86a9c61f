// Stream-ordered memory pools: cudaMallocFromPoolAsync / cudaFreeAsync with CUDA's reuse rules,
// poison written when a free executes, memory given back at synchronization points.
#include <cstring>

#include "cudaemu/runtime/state.h"

namespace cudaemu {

struct FreeBlock {
  std::uintptr_t base = 0;
  std::size_t block = 0;
  ItemPtr freed_by;  // the free's item: the block is free once it is done
  int stream_id = -1;
};

struct Pool {
  cudaMemPoolProps props{};
  bool is_default = false;
  bool destroyed = false;
  int follow_events = 1;
  int opportunistic = 1;
  int internal_deps = 1;
  std::uint64_t release_threshold = 0;
  std::uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::vector<FreeBlock> free;
};

}  // namespace cudaemu

struct CUmemPoolHandle_st : cudaemu::Pool {};

namespace cudaemu {
namespace {
std::mutex g_pool_mu;
std::vector<Pool*>& g_pools = *new std::vector<Pool*>;  // never freed: allocations name it
Pool* g_default = nullptr;

Pool* default_pool_locked() {
  if (g_default == nullptr) {
    g_default = new CUmemPoolHandle_st();
    g_default->is_default = true;
    g_default->props.allocType = cudaMemAllocationTypePinned;
    g_default->props.location.type = cudaMemLocationTypeDevice;
    g_default->props.location.id = 0;
    g_pools.push_back(g_default);
  }
  return g_default;
}

void account_used(Pool* p, std::int64_t delta) {
  p->used = static_cast<std::uint64_t>(static_cast<std::int64_t>(p->used) + delta);
  if (p->used > p->used_high) p->used_high = p->used;
}
}  // namespace

void trim_pools() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  for (Pool* p : g_pools) {
    for (size_t i = 0; i < p->free.size() && p->reserved > p->release_threshold;) {
      FreeBlock& b = p->free[i];
      if (b.freed_by && !b.freed_by->done.load()) {
        ++i;
        continue;
      }
      region_free(reinterpret_cast<void*>(b.base), b.block);
      p->reserved -= b.block;
      p->free.erase(p->free.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

void pool_forget(const Allocation& a) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  account_used(a.pool, -static_cast<std::int64_t>(a.block));
  a.pool->reserved -= a.block;
  region_free(reinterpret_cast<void*>(a.base), a.block);
}

}  // namespace cudaemu

using namespace cudaemu;

namespace {

cudaError_t pool_alloc(void** out, size_t size, Pool* pool, cudaStream_t stream) {
  if (out == nullptr || pool == nullptr) return ret(cudaErrorInvalidValue);
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(mu());
    cudaError_t e = capture_conflict_locked(s, false);
    if (e != cudaSuccess) return ret(e);
    // Graph memory nodes are not modelled.
    if (s->capture != nullptr) return ret(cudaErrorNotSupported);
  }
  *out = nullptr;
  if (size == 0) return ret(cudaErrorInvalidValue);
  ItemPtr wait_for;  // a free on another stream this allocation must follow
  Allocation a;
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (pool->destroyed) return ret(cudaErrorInvalidValue);
    int best = -1;
    for (size_t i = 0; i < pool->free.size(); ++i) {
      const FreeBlock& b = pool->free[i];
      if (b.block < size || b.block > 2 * size + 4096) continue;
      const bool done = !b.freed_by || b.freed_by->done.load();
      // Same stream: the free is earlier in stream order. Another stream: only once the free
      // has run (opportunistic) or behind a dependency on it (internal dependencies).
      const bool ok = b.stream_id == s->id || (done && pool->opportunistic) || pool->internal_deps;
      if (ok && (best < 0 || b.block < pool->free[static_cast<size_t>(best)].block)) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      FreeBlock b = pool->free[static_cast<size_t>(best)];
      pool->free.erase(pool->free.begin() + best);
      const bool done = !b.freed_by || b.freed_by->done.load();
      if (b.stream_id != s->id && !(done && pool->opportunistic)) wait_for = b.freed_by;
      a.base = b.base;
      a.size = size;
      a.block = b.block;
      a.pool = pool;
      add_device_allocation(a);
      account_used(pool, static_cast<std::int64_t>(b.block));
    }
  }
  if (a.base == 0) {
    void* p = new_device_allocation(size, pool);
    if (p == nullptr) return ret(cudaErrorMemoryAllocation);
    a.base = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(g_pool_mu);
    pool->reserved += size;
    if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    account_used(pool, static_cast<std::int64_t>(size));
  }
  if (wait_for) {
    // The internal dependency: the allocating stream waits for the other stream's free.
    std::lock_guard<std::mutex> lock(mu());
    auto item = std::make_shared<Item>();
    item->what = "pool reuse dependency";
    item->device_access = false;
    item->deps.push_back(wait_for);
    push_locked(s, item);
  }
  *out = reinterpret_cast<void*>(a.base);
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (pool == nullptr) return ret(cudaErrorInvalidValue);
  if (device != 0) return ret(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  *pool = static_cast<CUmemPoolHandle_st*>(default_pool_locked());
  return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (pool == nullptr || props == nullptr) return ret(cudaErrorInvalidValue);
  if (props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice) {
    return ret(cudaErrorInvalidValue);
  }
  if (props->location.id != 0) return ret(cudaErrorInvalidDevice);
  if (props->handleTypes != cudaMemHandleTypeNone) return ret(cudaErrorNotSupported);
  hazard_lock_call("cudaMemPoolCreate");
  auto* p = new CUmemPoolHandle_st();
  p->props = *props;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pools.push_back(p);
  *pool = p;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (pool == nullptr) return ret(cudaErrorInvalidValue);
  hazard_lock_call("cudaMemPoolDestroy");
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (pool->is_default || pool->destroyed) return ret(cudaErrorInvalidValue);
  // Outstanding allocations stay valid; free blocks go back once their frees have run.
  pool->destroyed = true;
  pool->release_threshold = 0;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (pool == nullptr || value == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
      pool->follow_events = *static_cast<int*>(value) != 0;
      return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic:
      pool->opportunistic = *static_cast<int*>(value) != 0;
      return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      pool->internal_deps = *static_cast<int*>(value) != 0;
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      pool->release_threshold = *static_cast<std::uint64_t*>(value);
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
      // Only a reset to zero is allowed.
      if (*static_cast<std::uint64_t*>(value) != 0) return ret(cudaErrorInvalidValue);
      if (attr == cudaMemPoolAttrReservedMemHigh) {
        pool->reserved_high = pool->reserved;
      } else {
        pool->used_high = pool->used;
      }
      return cudaSuccess;
    default:
      return ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (pool == nullptr || value == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  auto* u64 = static_cast<std::uint64_t*>(value);
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
      *static_cast<int*>(value) = pool->follow_events;
      return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic:
      *static_cast<int*>(value) = pool->opportunistic;
      return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      *static_cast<int*>(value) = pool->internal_deps;
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      *u64 = pool->release_threshold;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
      *u64 = pool->reserved;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      *u64 = pool->reserved_high;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemCurrent:
      *u64 = pool->used;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      *u64 = pool->used_high;
      return cudaSuccess;
    default:
      return ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMallocFromPoolAsync(void** p, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  return pool_alloc(p, size, pool, stream);
}

cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  Pool* pool;
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    pool = default_pool_locked();
  }
  return pool_alloc(p, size, pool, stream);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (p == nullptr) return cudaSuccess;
  Stream* s = resolve(stream);
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  Allocation a;
  if (!find_device_allocation(p, &a) || a.base != reinterpret_cast<std::uintptr_t>(p) ||
      a.pool == nullptr || a.free_queued) {
    return ret(cudaErrorInvalidValue);
  }
  ItemPtr item;
  const std::uint64_t gen = a.gen;
  Pool* pool = a.pool;
  e = submit(
      stream, "cudaFreeAsync",
      [a, gen] {
        // Stream-ordered free: poison, then the pointer is dead (unless reused meanwhile).
        std::memset(reinterpret_cast<void*>(a.base), kPoisonByte, a.block);
        take_device_allocation_if(reinterpret_cast<void*>(a.base), gen);
      },
      true, &item);
  if (e != cudaSuccess) return e;
  if (!item) return cudaSuccess;  // captured: graph memory nodes are not modelled
  mark_free_queued(p);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  account_used(pool, -static_cast<std::int64_t>(a.block));
  FreeBlock b;
  b.base = a.base;
  b.block = a.block;
  b.freed_by = item;
  b.stream_id = s->id;
  pool->free.push_back(b);
  return cudaSuccess;
}

}  // extern "C"
