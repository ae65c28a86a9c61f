#include "src/coll/buffer_states.h"

#include <gtest/gtest.h>

namespace sketchccl::coll {
namespace {

BufferKey key(uintptr_t addr, size_t count = 1024,
              kernels::ElemType type = kernels::ElemType::kF32) {
  return BufferKey{addr, count, type, CallKind::kAllReduce};
}

TEST(BufferStates, KeepsAStatePerAddressCountAndType) {
  BufferStates s;
  s.get(key(0x1000)).nonzeros = 7;
  EXPECT_EQ(s.get(key(0x1000)).nonzeros, 7u);
  // Another tensor at the same address with another size or type is another buffer.
  EXPECT_EQ(s.get(key(0x1000, 2048)).nonzeros, 0u);
  EXPECT_EQ(s.get(key(0x1000, 1024, kernels::ElemType::kBf16)).nonzeros, 0u);
  EXPECT_EQ(s.size(), 3u);
}

TEST(BufferStates, DropsTheLeastRecentlyUsedPastItsCap) {
  BufferStates s(2);
  s.get(key(0xa)).nonzeros = 1;
  s.get(key(0xb)).nonzeros = 2;
  s.get(key(0xa));  // a is now the most recently used
  s.get(key(0xc)).nonzeros = 3;
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.dropped(), 1u);
  EXPECT_EQ(s.get(key(0xa)).nonzeros, 1u);  // kept
  EXPECT_EQ(s.get(key(0xc)).nonzeros, 3u);  // kept
  EXPECT_EQ(s.get(key(0xb)).nonzeros, 0u);  // dropped: made afresh (and a dropped in turn)
  EXPECT_EQ(s.dropped(), 2u);
}

TEST(BufferStates, TheDefaultCapBoundsManyShortLivedBuffers) {
  BufferStates s;
  for (uintptr_t a = 0; a < 10 * BufferStates::kMaxBufferStates; ++a)
    s.get(key(0x10000 + 64 * a));
  EXPECT_EQ(s.size(), BufferStates::kMaxBufferStates);
}

// A buffer whose state was dropped and that comes back (another tensor at a reused address)
// gets a new generation: an error-feedback residual of the old one is never applied to it.
TEST(BufferStates, AStateMadeAgainHasANewGenerationAndNoResidual) {
  BufferStates s(1);
  BufferState& first = s.get(key(0xa));
  const uint64_t gen = first.generation;
  first.have_history = true;
  first.residual_generation = gen;
  s.get(key(0xb));  // drops a
  BufferState& again = s.get(key(0xa));
  EXPECT_NE(again.generation, gen);
  EXPECT_FALSE(again.have_history);
  EXPECT_EQ(again.residual, nullptr);
  EXPECT_NE(again.residual_generation, again.generation);  // buffer_residual makes a fresh one
}

}  // namespace
}  // namespace sketchccl::coll
