// Reserved packet memory leased from a process pool (packet_arena.h).
#include "src/backend/packet_arena.h"

#include <algorithm>
#include <utility>

namespace sketchccl::backend {

PacketArena::PacketArena(MemoryPool& pool, size_t min_block, size_t max_block)
    : pool_(pool), min_block_(min_block), max_block_(std::max(min_block, max_block)) {
  pool_.add_user();
}

PacketArena::~PacketArena() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.clear();  // leases back (release() first abandons those a device may still write)
  }
  pool_.remove_user();
}

size_t PacketArena::block_size_locked() const {
  size_t cap = min_block_;
  while (cap < largest_wanted_ && cap < max_block_)
    cap *= 2;
  return std::min(cap, max_block_);
}

Status PacketArena::reserve(size_t bytes) {
  size_t cap = 0;
  bool missed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++reservations_;
    largest_wanted_ = std::max(largest_wanted_, std::min(bytes, max_block_));
    cap = block_size_locked();
    missed = missed_;
    missed_ = false;
    // Held already (a reserved operation still runs or waits): the next one uses it.
    if (!missed && !blocks_.empty() && blocks_.back().lease.capacity() >= cap) {
      return Status::Ok();
    }
  }
  // Outside the lock: a pinned allocation takes milliseconds, and the proxy must not wait.
  const bool ok = (!missed || pool_.add_block(cap)) && pool_.provision(cap, 1);
  if (!ok) {
    return errorf(Code::kSystemError, "could not allocate %zu bytes of packet memory for the pool",
                  cap);
  }
  return Status::Ok();
}

void PacketArena::end_reservation(bool ok) {
  std::vector<Block> back;  // given back outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (reservations_ > 0) --reservations_;
  if (!ok) return;
  // Back even while reservations remain: the next call leases a kept block again, this one unless
  // another communicator's call ran in between (its callers may be rounds ahead of the device).
  std::vector<Block> kept;
  for (Block& a : blocks_)
    (a.live == 0 ? back : kept).push_back(std::move(a));
  blocks_.swap(kept);
}

void* PacketArena::alloc(size_t bytes) {
  const size_t b = (bytes + 255) & ~size_t(255);
  std::lock_guard<std::mutex> lock(mu_);
  const size_t cap = block_size_locked();
  // A block of the reserved size: the one held, or one leased now from what the pool keeps.
  if (blocks_.empty() || blocks_.back().lease.capacity() < cap) {
    if (reservations_ == 0) return nullptr;  // leased only for reserved operations
    PoolLease lease = pool_.take_kept(std::max(cap, b));
    if (!lease) {
      ++misses_;
      missed_ = true;
      return nullptr;
    }
    blocks_.push_back(Block{std::move(lease), 0, 0});
    peak_ = std::max(peak_, leased_locked());
  }
  Block& a = blocks_.back();
  if (a.lease.capacity() - a.top < b) return nullptr;  // beyond the reservation
  void* p = a.lease.data() + a.top;
  a.top += b;
  a.live++;
  return p;
}

bool PacketArena::free(void* p) {
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (Block& a : blocks_) {
    if (!a.lease.contains(p)) continue;
    if (--a.live == 0) a.top = 0;
    return true;
  }
  return false;
}

bool PacketArena::contains(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Block& a : blocks_) {
    if (a.lease.contains(p, bytes)) return true;
  }
  return false;
}

void PacketArena::release(bool idle) {
  std::vector<Block> back;
  std::lock_guard<std::mutex> lock(mu_);
  back.swap(blocks_);
  if (!idle) {
    for (Block& a : back)
      a.lease.abandon();
  }
}

uint64_t PacketArena::leased_locked() const {
  uint64_t n = 0;
  for (const Block& a : blocks_)
    n += a.lease.capacity();
  return n;
}

uint64_t PacketArena::leased_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leased_locked();
}

uint64_t PacketArena::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

int PacketArena::reservations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reservations_;
}

uint64_t PacketArena::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace sketchccl::backend
