// Packet memory for reserved operations (the CUDA backend's pinned packets, docs/memory.md),
// leased from a process pool (memory_pool.h). The caller's thread reserves before its operation
// is queued: the pool then holds a block the operation can lease (allocated there if need be).
// The proxy leases a kept block when the operation first asks for packets (never allocating),
// bump-allocates the operation's packets from it, rewinds when they are all back, and gives the
// block back to the pool when the operation ends. So operations of communicators that run one
// after another (one stream: each waits for the one before it) lease the same block, however
// early and in whatever order their callers reserved; operations that overlap lease distinct
// blocks, and one that finds none kept takes other memory and makes the next reservation provision
// one more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "src/backend/memory_pool.h"
#include "src/core/status.h"

namespace sketchccl::backend {

class PacketArena {
 public:
  // Blocks from `pool`, of a power of two from `min_block` up to `max_block` bytes.
  PacketArena(MemoryPool& pool, size_t min_block, size_t max_block);
  ~PacketArena();
  PacketArena(const PacketArena&) = delete;
  PacketArena& operator=(const PacketArena&) = delete;

  // The caller's thread, before its operation is queued: counts a reservation, and makes the
  // pool hold a block of the largest size any reservation of this arena asked for (at most
  // max_block), unless this arena holds one; one more after a miss. The reservation counts even
  // when the allocation fails (its operation then takes other memory).
  Status reserve(size_t bytes);
  // The operation of a reservation ended (`ok`: without a failure) or will never run: every block
  // whose packets are all back returns to the pool; after a failure nothing does (the device may
  // still write it): the blocks stay until release().
  void end_reservation(bool ok);

  // The proxy: `bytes` (rounded to 256) of the current block, leasing a kept block of the pool
  // when there is none or it is full; null when the pool keeps none that fits (a miss: the
  // caller takes other memory).
  void* alloc(size_t bytes);
  // Whether `p` came from alloc (then it is handed back here).
  bool free(void* p);
  // Whether [p, p+bytes) lies in a block held now.
  bool contains(const void* p, size_t bytes) const;
  // Every block goes back to the pool (`idle`: no device work can still use them), or is
  // abandoned to it (never leased again) when that could not be seen.
  void release(bool idle);

  uint64_t leased_bytes() const;
  uint64_t peak_bytes() const;  // the most this arena leased at once
  int reservations() const;
  uint64_t misses() const;  // allocs that found no block to lease

 private:
  struct Block {
    PoolLease lease;
    size_t top = 0;
    int live = 0;  // packets handed out and not yet back
  };
  uint64_t leased_locked() const;
  size_t block_size_locked() const;  // for the largest reservation

  MemoryPool& pool_;
  const size_t min_block_, max_block_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // the last is current; earlier ones are outgrown
  size_t largest_wanted_ = 0;
  int reservations_ = 0;
  uint64_t peak_ = 0;
  uint64_t misses_ = 0;
  bool missed_ = false;  // since the last provision
};

}  // namespace sketchccl::backend
