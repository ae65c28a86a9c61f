// Packet and staging memory shared by every communicator of the process (docs/memory.md): one
// pool per kind of memory and device, from which the host backend (packets) and the device
// stagers (device_staging.h) lease a block for as long as a call uses it. Communicators whose calls follow one another (FSDP's, one stream) reuse the same blocks;
// calls that overlap hold distinct ones, so no result depends on the callers' timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace sketchccl::backend {

// Where a pool's blocks come from: plain host memory, or pinned memory (device calls' staging).
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // A block of exactly `bytes`, 64-byte aligned at least; null when there is no memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
};

// What a pool holds, for the statistics (the per-process figures of every communicator).
struct PoolFigures {
  uint64_t held_bytes = 0;       // blocks the pool holds now, leased or kept for reuse
  uint64_t leased_bytes = 0;     // of those, leased now
  uint64_t peak_held_bytes = 0;  // the most it ever held at once
  uint64_t leases = 0;           // leases handed out
  uint64_t reuses = 0;           // of those, served from a kept block (nothing allocated)
  uint64_t trimmed_bytes = 0;    // given back to the system by trims and the keep limit
  uint64_t users = 0;            // backends and device stagers drawing from it now
};

class MemoryPool;

// A block leased from a pool: the holder's alone until it is reset or destroyed, when it goes
// back to the pool for the next lease. Move-only.
class PoolLease {
 public:
  PoolLease() = default;
  PoolLease(PoolLease&& o) noexcept { *this = std::move(o); }
  PoolLease& operator=(PoolLease&& o) noexcept;
  PoolLease(const PoolLease&) = delete;
  PoolLease& operator=(const PoolLease&) = delete;
  ~PoolLease() { reset(); }

  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t capacity() const { return cap_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool contains(const void* q, size_t bytes = 1) const {
    const uint8_t* b = static_cast<const uint8_t*>(q);
    return p_ != nullptr && b >= data() && b + bytes <= data() + cap_;
  }
  // Gives the block back to the pool.
  void reset();
  // The block is never leased again (a device may still write it after a failed wait); it stays
  // counted as leased, and the pool frees it only at its own end.
  void abandon();

 private:
  friend class MemoryPool;
  MemoryPool* pool_ = nullptr;
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class MemoryPool {
 public:
  // Blocks under `min_kept` bytes are freed when given back, not kept; at most `max_kept` blocks
  // are kept (the oldest is freed first; 0: no limit, for pinned memory freed only by trims).
  MemoryPool(std::unique_ptr<BlockSource> source, size_t min_kept, size_t max_kept);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A block of at least `bytes` (rounded up to 64): the smallest kept block that fits, if it is
  // not over 4 times too large (a small lease would otherwise hold a block a large one needs),
  // else a fresh one. Empty when the source has no memory.
  PoolLease take(size_t bytes) { return take(bytes, true); }
  // A kept block only, as take() chooses it; empty when none fits. Never allocates (for a thread
  // that must not, such as a proxy).
  PoolLease take_kept(size_t bytes) { return take(bytes, false); }
  // Makes sure at least `count` kept blocks would serve take_kept(bytes), allocating the rest
  // (the caller's thread, ahead of a call whose proxy will lease one). False when the source has
  // no memory.
  bool provision(size_t bytes, size_t count);
  // Allocates one more kept block for take_kept(bytes), whatever is kept (after a lease found
  // none: calls overlap more than the pool holds for). False when the source has no memory.
  bool add_block(size_t bytes);
  // Frees every kept block (none that is leased); returns the bytes freed.
  size_t trim();
  // A user (backend, device stager) comes and goes; when the last goes, the pool is trimmed.
  void add_user();
  void remove_user();
  PoolFigures figures() const;

 private:
  friend class PoolLease;
  struct Block {
    void* p;
    size_t cap;
  };
  PoolLease take(size_t bytes, bool allocate);
  // Whether a kept block of `cap` bytes would serve a lease of `want`.
  static bool fits(size_t cap, size_t want) { return cap >= want && cap / 4 <= want; }
  void give(void* p, size_t cap);
  void abandon(void* p, size_t cap);
  // Frees `blocks` outside the lock (a pinned free may wait for the device).
  void release_all(const std::vector<Block>& blocks);

  const std::unique_ptr<BlockSource> source_;
  const size_t min_kept_;
  const size_t max_kept_;
  mutable std::mutex mu_;
  std::vector<Block> kept_;  // oldest first
  std::vector<Block> abandoned_;
  PoolFigures f_;
};

// The process's pools, one per kind and device, made at their first use and never destroyed
// (the CUDA runtime may be gone when static destructors run).
enum class PoolKind { kHostPackets, kPinnedStaging };
// The pool of plain host packet memory (the host backend's): 1 MiB blocks and larger are kept,
// at most 32.
MemoryPool& host_packet_pool();
// The pool of `kind` for `device`, made from `make_source` at its first use (later calls ignore
// it); `max_kept` as MemoryPool's.
MemoryPool& process_pool(PoolKind kind, int device, size_t min_kept, size_t max_kept,
                         std::unique_ptr<BlockSource> (*make_source)(int device));
// Plain host memory as a pool's source (the host packet pool's; a test's model of pinned memory).
std::unique_ptr<BlockSource> make_host_block_source(int device);
// Its figures: zeros when it was never made.
PoolFigures process_pool_figures(PoolKind kind, int device);
// Trims every pool of the process (ncclCommSuspend with NCCL_SUSPEND_MEM); the bytes freed.
size_t trim_process_pools();

}  // namespace sketchccl::backend
