// The process's shared packet memory (memory_pool.h): leases of kept blocks, their figures, and
// the registry of one pool per kind of memory and device.
#include "src/backend/memory_pool.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

namespace sketchccl::backend {

PoolLease& PoolLease::operator=(PoolLease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = std::exchange(o.pool_, nullptr);
    p_ = std::exchange(o.p_, nullptr);
    cap_ = std::exchange(o.cap_, 0);
  }
  return *this;
}

void PoolLease::reset() {
  if (p_ != nullptr) pool_->give(p_, cap_);
  pool_ = nullptr;
  p_ = nullptr;
  cap_ = 0;
}

void PoolLease::abandon() {
  if (p_ != nullptr) pool_->abandon(p_, cap_);
  pool_ = nullptr;
  p_ = nullptr;
  cap_ = 0;
}

MemoryPool::MemoryPool(std::unique_ptr<BlockSource> source, size_t min_kept, size_t max_kept)
    : source_(std::move(source)), min_kept_(min_kept), max_kept_(max_kept) {}

MemoryPool::~MemoryPool() {
  release_all(kept_);
  release_all(abandoned_);
}

namespace {
size_t round_up(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + 63) & ~size_t(63);
}
}  // namespace

PoolLease MemoryPool::take(size_t bytes, bool allocate) {
  const size_t want = round_up(bytes);
  PoolLease lease;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i) {
      const size_t cap = kept_[i].cap;
      if (fits(cap, want) && (best == kept_.size() || cap < kept_[best].cap)) best = i;
    }
    if (best < kept_.size()) {
      const Block b = kept_[best];
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      f_.leased_bytes += b.cap;
      ++f_.leases;
      ++f_.reuses;
      lease.pool_ = this;
      lease.p_ = b.p;
      lease.cap_ = b.cap;
      return lease;
    }
  }
  if (!allocate) return lease;
  // Allocated outside the lock: pinned memory takes milliseconds, and other leases need not wait.
  void* p = source_->allocate(want);
  if (p == nullptr) return lease;
  std::lock_guard<std::mutex> lock(mu_);
  f_.held_bytes += want;
  f_.leased_bytes += want;
  f_.peak_held_bytes = std::max(f_.peak_held_bytes, f_.held_bytes);
  ++f_.leases;
  lease.pool_ = this;
  lease.p_ = p;
  lease.cap_ = want;
  return lease;
}

bool MemoryPool::provision(size_t bytes, size_t count) {
  const size_t want = round_up(bytes);
  size_t have = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Block& b : kept_)
      have += fits(b.cap, want) ? 1 : 0;
  }
  for (; have < count; ++have) {
    if (!add_block(want)) return false;
  }
  return true;
}

bool MemoryPool::add_block(size_t bytes) {
  const size_t want = round_up(bytes);
  void* p = source_->allocate(want);
  if (p == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  kept_.push_back({p, want});
  f_.held_bytes += want;
  f_.peak_held_bytes = std::max(f_.peak_held_bytes, f_.held_bytes);
  return true;
}

void MemoryPool::give(void* p, size_t cap) {
  std::vector<Block> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f_.leased_bytes -= cap;
    if (cap < min_kept_) {
      drop.push_back({p, cap});
    } else {
      kept_.push_back({p, cap});
      if (max_kept_ != 0 && kept_.size() > max_kept_) {  // the oldest goes
        drop.push_back(kept_.front());
        kept_.erase(kept_.begin());
      }
    }
    for (const Block& b : drop) {
      f_.held_bytes -= b.cap;
      f_.trimmed_bytes += b.cap;
    }
  }
  release_all(drop);
}

void MemoryPool::abandon(void* p, size_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_.push_back({p, cap});
}

size_t MemoryPool::trim() {
  std::vector<Block> drop;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drop.swap(kept_);
    for (const Block& b : drop)
      bytes += b.cap;
    f_.held_bytes -= bytes;
    f_.trimmed_bytes += bytes;
  }
  release_all(drop);
  return bytes;
}

void MemoryPool::add_user() {
  std::lock_guard<std::mutex> lock(mu_);
  ++f_.users;
}

void MemoryPool::remove_user() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (f_.users > 0) --f_.users;
    if (f_.users > 0) return;
  }
  trim();
}

PoolFigures MemoryPool::figures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return f_;
}

void MemoryPool::release_all(const std::vector<Block>& blocks) {
  for (const Block& b : blocks)
    source_->release(b.p, b.cap);
}

namespace {

class HostSource final : public BlockSource {
 public:
  void* allocate(size_t bytes) override { return std::aligned_alloc(64, bytes); }
  void release(void* p, size_t) override { std::free(p); }
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<PoolKind, int>, std::unique_ptr<MemoryPool>> pools;
};

// Never destroyed: a backend may outlive static destruction (a communicator leaked at exit).
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::unique_ptr<BlockSource> make_host_block_source(int) {
  return std::make_unique<HostSource>();
}

MemoryPool& host_packet_pool() {
  static MemoryPool& pool =
      process_pool(PoolKind::kHostPackets, -1, size_t(1) << 20, 32, make_host_block_source);
  return pool;
}

MemoryPool& process_pool(PoolKind kind, int device, size_t min_kept, size_t max_kept,
                         std::unique_ptr<BlockSource> (*make_source)(int device)) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::unique_ptr<MemoryPool>& p = r.pools[{kind, device}];
  if (!p) p = std::make_unique<MemoryPool>(make_source(device), min_kept, max_kept);
  return *p;
}

PoolFigures process_pool_figures(PoolKind kind, int device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.pools.find({kind, device});
  return it == r.pools.end() ? PoolFigures{} : it->second->figures();
}

size_t trim_process_pools() {
  std::vector<MemoryPool*> pools;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& [key, p] : r.pools)
      pools.push_back(p.get());
  }
  size_t bytes = 0;
  for (MemoryPool* p : pools)
    bytes += p->trim();
  return bytes;
}

}  // namespace sketchccl::backend
