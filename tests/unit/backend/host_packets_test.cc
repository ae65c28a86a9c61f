// The host backend's packet memory: blocks freed by one operation are handed to the next, so a
// large call does not pay a page fault per 4 KiB of fresh memory on every call.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "src/backend/backend.h"
#include "src/backend/memory_pool.h"

namespace sketchccl::backend {
namespace {

// Larger than glibc's largest mmap threshold (32 MiB): without reuse every such block is fresh,
// zeroed memory.
constexpr size_t kLarge = size_t(48) << 20;

void mark(uint8_t* p, size_t n, uint8_t v) {
  for (size_t off = 0; off < n; off += 4096)
    p[off] = v;
}
bool marked(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t off = 0; off < n; off += 4096) {
    if (p[off] != v) return false;
  }
  return true;
}

TEST(HostPackets, LargeBlockIsHandedOutAgainAfterItIsFreed) {
  std::unique_ptr<Backend> be = make_host_backend();
  auto* a = static_cast<uint8_t*>(be->alloc_packets(kLarge));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  mark(a, kLarge, 0xa5);
  be->free_packets(a);
  // The next operation of about the same size gets the same memory, its pages already mapped
  // (the marks are still there: not fresh zeroed pages).
  auto* b = static_cast<uint8_t*>(be->alloc_packets(kLarge - 1000));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, a);
  EXPECT_TRUE(marked(b, kLarge - 1000, 0xa5));
  be->free_packets(b);
}

TEST(HostPackets, ABlockIsNeverSmallerThanAskedNorSharedWhileInUse) {
  std::unique_ptr<Backend> be = make_host_backend();
  auto* small = static_cast<uint8_t*>(be->alloc_packets(size_t(2) << 20));
  ASSERT_NE(small, nullptr);
  be->free_packets(small);
  // Larger than the kept block: fresh memory, all of it writable.
  auto* big = static_cast<uint8_t*>(be->alloc_packets(kLarge));
  ASSERT_NE(big, nullptr);
  EXPECT_NE(big, small);
  std::memset(big, 1, kLarge);
  // Two blocks in use at once are distinct, whatever is kept.
  auto* c = static_cast<uint8_t*>(be->alloc_packets(size_t(2) << 20));
  auto* d = static_cast<uint8_t*>(be->alloc_packets(size_t(2) << 20));
  ASSERT_NE(c, nullptr);
  ASSERT_NE(d, nullptr);
  EXPECT_NE(c, d);
  std::memset(c, 2, size_t(2) << 20);
  std::memset(d, 3, size_t(2) << 20);
  EXPECT_EQ(c[0], 2);
  EXPECT_EQ(d[0], 3);
  // A small request does not take a block more than 4 times its size.
  be->free_packets(big);
  auto* tiny = static_cast<uint8_t*>(be->alloc_packets(size_t(1) << 20));
  ASSERT_NE(tiny, nullptr);
  EXPECT_NE(tiny, big);
  for (void* p : {static_cast<void*>(c), static_cast<void*>(d), static_cast<void*>(tiny)})
    be->free_packets(p);
  be->free_packets(nullptr);  // allowed, as free()
}

// Host backends of different communicators draw from the process's one pool: a block one of
// them gave back is the next one's, and each counts only what it leases.
TEST(HostPackets, BackendsOfOtherCommunicatorsShareTheProcessPool) {
  std::unique_ptr<Backend> a = make_host_backend(), b = make_host_backend();
  auto* p = static_cast<uint8_t*>(a->alloc_packets(kLarge));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a->memory_figures().packet_leased_bytes, kLarge);
  EXPECT_EQ(b->memory_figures().packet_leased_bytes, 0u);
  auto* q = static_cast<uint8_t*>(b->alloc_packets(kLarge));  // while a holds p: another block
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  b->free_packets(q);
  a->free_packets(p);
  const PoolFigures before = host_packet_pool().figures();
  EXPECT_EQ(before.held_bytes, 2 * kLarge);
  EXPECT_EQ(before.users, 2u);
  for (int i = 0; i < 3; ++i) {  // one after another: the kept blocks, nothing allocated
    Backend& be = i % 2 == 0 ? *a : *b;
    void* r = be.alloc_packets(kLarge);
    EXPECT_TRUE(r == p || r == q);
    be.free_packets(r);
  }
  const PoolFigures after = host_packet_pool().figures();
  EXPECT_EQ(after.held_bytes, 2 * kLarge);
  EXPECT_EQ(after.reuses - before.reuses, 3u);
  EXPECT_EQ(a->memory_figures().packet_peak_bytes, kLarge);
  EXPECT_EQ(a->memory_figures().packet_leased_bytes, 0u);
  a.reset();
  b.reset();  // the last user: the pool is trimmed
  EXPECT_EQ(host_packet_pool().figures().held_bytes, 0u);
}

}  // namespace
}  // namespace sketchccl::backend
