// The process's memory pools (memory_pool.h: host packets, pinned staging), on host memory:
// communicators whose calls follow one another share one block, calls that overlap hold distinct
// ones, growth, trims and the figures. The staging pool as device calls lease it:
// device_staging_protocol_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "src/backend/memory_pool.h"

namespace sketchccl::backend {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// Host memory that counts what it hands out; fails on demand.
struct Counts {
  std::atomic<int> allocations{0}, releases{0};
  std::atomic<int64_t> outstanding{0};
  std::atomic<bool> fail{false};
};
class CountingSource final : public BlockSource {
 public:
  explicit CountingSource(Counts* c) : c_(c) {}
  void* allocate(size_t bytes) override {
    if (c_->fail) return nullptr;
    c_->allocations++;
    c_->outstanding += static_cast<int64_t>(bytes);
    return std::aligned_alloc(64, bytes);
  }
  void release(void* p, size_t bytes) override {
    c_->releases++;
    c_->outstanding -= static_cast<int64_t>(bytes);
    std::free(p);
  }

 private:
  Counts* c_;
};

std::unique_ptr<MemoryPool> make_pool(Counts* c, size_t min_kept = 0, size_t max_kept = 0) {
  return std::make_unique<MemoryPool>(std::make_unique<CountingSource>(c), min_kept, max_kept);
}

bool overlap(const PoolLease& a, const PoolLease& b) {
  return a.data() < b.data() + b.capacity() && b.data() < a.data() + a.capacity();
}

TEST(MemoryPool, SequentialLeasesOfThreeCommunicatorsShareOneBlock) {
  Counts c;
  auto pool = make_pool(&c);
  for (int comm = 0; comm < 3; ++comm) {
    PoolLease l = pool->take(8 * kMiB);
    ASSERT_TRUE(l);
    EXPECT_GE(l.capacity(), 8 * kMiB);
    std::memset(l.data(), comm, l.capacity());  // all of it is the holder's
  }
  const PoolFigures f = pool->figures();
  EXPECT_EQ(c.allocations, 1);
  EXPECT_EQ(f.held_bytes, 8 * kMiB);  // once, not three times
  EXPECT_EQ(f.peak_held_bytes, 8 * kMiB);
  EXPECT_EQ(f.leased_bytes, 0u);
  EXPECT_EQ(f.leases, 3u);
  EXPECT_EQ(f.reuses, 2u);
}

TEST(MemoryPool, OverlappingLeasesGetDistinctBlocks) {
  Counts c;
  auto pool = make_pool(&c);
  PoolLease a = pool->take(8 * kMiB);
  PoolLease b = pool->take(8 * kMiB);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(overlap(a, b));
  EXPECT_EQ(pool->figures().leased_bytes, 16 * kMiB);
  a.reset();
  // The next lease takes a's block, never b's.
  PoolLease d = pool->take(7 * kMiB);
  EXPECT_FALSE(overlap(d, b));
  EXPECT_EQ(c.allocations, 2);
}

TEST(MemoryPool, GrowsToTheLargestRequestAndKeepsSmallLeasesOffLargeBlocks) {
  Counts c;
  auto pool = make_pool(&c);
  pool->take(4 * kMiB).reset();
  PoolLease big = pool->take(16 * kMiB);  // the kept 4 MiB block is too small
  EXPECT_EQ(big.capacity(), 16 * kMiB);
  EXPECT_EQ(c.allocations, 2);
  big.reset();
  EXPECT_EQ(pool->take(16 * kMiB).capacity(), 16 * kMiB);  // reused
  EXPECT_EQ(pool->take(3 * kMiB).capacity(), 4 * kMiB);    // the smallest that fits
  // Half a MiB takes neither kept block (each over 4 times too large): fresh memory.
  EXPECT_EQ(pool->take(kMiB / 2).capacity(), kMiB / 2);
  const PoolFigures f = pool->figures();
  EXPECT_EQ(c.allocations, 3);
  EXPECT_EQ(f.held_bytes, 20 * kMiB + kMiB / 2);
  EXPECT_EQ(f.peak_held_bytes, 20 * kMiB + kMiB / 2);
  EXPECT_EQ(f.reuses, 2u);
}

TEST(MemoryPool, TrimFreesOnlyBlocksNoLeaseUses) {
  Counts c;
  auto pool = make_pool(&c);
  PoolLease held = pool->take(2 * kMiB);
  pool->take(8 * kMiB).reset();
  EXPECT_EQ(pool->trim(), 8 * kMiB);
  EXPECT_EQ(c.outstanding, int64_t(2 * kMiB));
  std::memset(held.data(), 7, held.capacity());  // still the holder's
  PoolFigures f = pool->figures();
  EXPECT_EQ(f.held_bytes, 2 * kMiB);
  EXPECT_EQ(f.trimmed_bytes, 8 * kMiB);
  held.reset();
  EXPECT_EQ(pool->figures().held_bytes, 2 * kMiB);  // kept for the next lease
  pool.reset();
  EXPECT_EQ(c.outstanding, 0);
}

TEST(MemoryPool, TheLastUserGoingTrimsThePool) {
  Counts c;
  auto pool = make_pool(&c);
  pool->add_user();
  pool->add_user();
  pool->take(4 * kMiB).reset();
  pool->remove_user();
  EXPECT_EQ(pool->figures().held_bytes, 4 * kMiB);
  EXPECT_EQ(pool->figures().users, 1u);
  pool->remove_user();
  EXPECT_EQ(pool->figures().held_bytes, 0u);
  EXPECT_EQ(c.outstanding, 0);
}

TEST(MemoryPool, SmallBlocksAndBlocksBeyondTheKeepLimitAreFreed) {
  Counts c;
  auto pool = make_pool(&c, kMiB, 2);
  pool->take(4096).reset();  // under min_kept: freed at once
  EXPECT_EQ(c.releases, 1);
  PoolLease a = pool->take(2 * kMiB), b = pool->take(2 * kMiB), d = pool->take(2 * kMiB);
  a.reset();
  b.reset();
  d.reset();  // the third kept block: the oldest (a's) goes
  EXPECT_EQ(c.releases, 2);
  EXPECT_EQ(pool->figures().held_bytes, 4 * kMiB);
}

TEST(MemoryPool, AnAbandonedBlockIsNeverLeasedAgain) {
  Counts c;
  auto pool = make_pool(&c);
  PoolLease a = pool->take(4 * kMiB);
  void* p = a.data();
  a.abandon();
  PoolLease b = pool->take(4 * kMiB);
  EXPECT_NE(b.data(), p);
  EXPECT_EQ(pool->figures().leased_bytes, 8 * kMiB);  // still counted: someone may write it
  EXPECT_EQ(pool->trim(), 0u);
  b.reset();
  pool.reset();
  EXPECT_EQ(c.outstanding, 0);  // freed at the pool's end
}

TEST(MemoryPool, NoMemoryGivesAnEmptyLease) {
  Counts c;
  auto pool = make_pool(&c);
  c.fail = true;
  PoolLease l = pool->take(kMiB);
  EXPECT_FALSE(l);
  EXPECT_EQ(pool->figures().held_bytes, 0u);
  EXPECT_EQ(pool->figures().leases, 0u);
}

// Threads lease, fill with their own byte, check and give back, many times: no block is ever
// held by two at once, and the figures add up.
TEST(MemoryPool, ManyThreadsNeverShareABlock) {
  Counts c;
  auto pool = make_pool(&c, kMiB / 4, 16);
  constexpr int kThreads = 8;
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < 400; ++i) {
        const size_t bytes = (size_t(1) << (12 + rng() % 9)) + rng() % 4096;  // 4 KiB .. 1 MiB
        PoolLease l = pool->take(bytes);
        if (!l || l.capacity() < bytes) {
          bad++;
          continue;
        }
        const auto mark = static_cast<uint8_t>(t + 1);
        std::memset(l.data(), mark, bytes);
        std::this_thread::yield();
        for (size_t off = 0; off < bytes; off += 512) {
          if (l.data()[off] != mark) bad++;
        }
      }
    });
  }
  for (auto& th : ts)
    th.join();
  EXPECT_EQ(bad, 0);
  const PoolFigures f = pool->figures();
  EXPECT_EQ(f.leased_bytes, 0u);
  EXPECT_EQ(f.leases, uint64_t(kThreads) * 400);
  EXPECT_EQ(static_cast<int64_t>(f.held_bytes), c.outstanding.load());
  EXPECT_LE(f.held_bytes, f.peak_held_bytes);
  EXPECT_GT(f.reuses, 0u);
}

TEST(MemoryPool, TheProcessPoolsAreOnePerKindAndDevice) {
  MemoryPool& host = host_packet_pool();
  EXPECT_EQ(&host, &host_packet_pool());
  // Never made: zeros (nothing here makes a pinned pool).
  EXPECT_EQ(process_pool_figures(PoolKind::kPinnedStaging, 7).leases, 0u);
  const uint64_t before = process_pool_figures(PoolKind::kHostPackets, -1).leases;
  host.take(2 * kMiB).reset();
  EXPECT_EQ(process_pool_figures(PoolKind::kHostPackets, -1).leases, before + 1);
  EXPECT_GE(process_pool_figures(PoolKind::kHostPackets, -1).held_bytes, 2 * kMiB);
  trim_process_pools();
  EXPECT_EQ(process_pool_figures(PoolKind::kHostPackets, -1).held_bytes, 0u);
}

}  // namespace
}  // namespace sketchccl::backend
