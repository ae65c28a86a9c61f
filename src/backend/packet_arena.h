// Packet memory for reserved operations (the CUDA backend's pinned packets, docs/memory.md): a
// block leased from a process pool (memory_pool.h) on the caller's thread, bump-allocated on the
// proxy during an operation and rewound when the operation has handed everything back. The block
// stays leased while reserved operations remain, and goes back to the pool when the last one
// ends, so that another communicator's next operation reuses it. The proxy never allocates: a
// pool of pinned memory is only drawn from by reserve().
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

  // The caller's thread, before its operation is queued: counts a reservation, and leases a
  // block of the largest size any reservation asked for (at most max_block) unless the current
  // one is as large. A block outgrown meanwhile stays leased until its packets are all back.
  // The reservation counts even when the lease fails (its operation then takes other memory).
  Status reserve(size_t bytes);
  // The operation of a reservation ended (`ok`: without a failure) or will never run. With none
  // left, every block whose packets are all back returns to the pool; after a failure nothing
  // does (the device may still write it): the blocks stay until release().
  void end_reservation(bool ok);

  // The proxy: `bytes` (rounded to 256) of the current block, or null when it has no room.
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

 private:
  struct Block {
    PoolLease lease;
    size_t top = 0;
    int live = 0;  // packets handed out and not yet back
  };
  uint64_t leased_locked() const;

  MemoryPool& pool_;
  const size_t min_block_, max_block_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // the last is current; earlier ones are outgrown
  size_t largest_wanted_ = 0;
  int reservations_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace sketchccl::backend
