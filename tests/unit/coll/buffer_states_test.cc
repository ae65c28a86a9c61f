#include "src/coll/buffer_states.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/coll/engine_ranks.h"

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

// A hierarchy's rail reads a copy or a scratch whose address says nothing of the user's buffer:
// given ReductionArgs::state_key, the engine keeps one state per key, whatever the send address.
TEST(BufferStates, AnEngineKeepsItsStateByTheStateKeyWhenGiven) {
  constexpr int kRanks = 2;
  constexpr size_t kCount = 4096;
  Settings s;
  s.auto_codec = false;
  s.codec = kernels::CodecId::kQ8;
  testutil::EngineRanks ranks(kRanks, s, 30);
  const std::vector<std::vector<float>> first(kRanks, std::vector<float>(kCount, 1.0f));
  const std::vector<std::vector<float>> second = first;  // another address, the same user buffer
  std::vector<std::vector<float>> y(kRanks, std::vector<float>(kCount / kRanks));
  int users[kRanks] = {0, 0};
  const std::vector<const void*> keys = {&users[0], &users[1]};
  auto as_void = [](const std::vector<std::vector<float>>& v) {
    std::vector<const void*> d;
    for (const auto& x : v)
      d.push_back(x.data());
    return d;
  };
  std::vector<void*> out;
  for (auto& x : y)
    out.push_back(x.data());
  const auto f32 = kernels::ElemType::kF32;
  ranks.run(1, as_void(first), out, kCount, true, f32, false, keys);
  ranks.run(2, as_void(second), out, kCount, true, f32, false, keys);
  EXPECT_EQ(ranks.engine(0).buffer_states(), 1u);
  // Without a key: one state per send address.
  ranks.run(3, as_void(first), out, kCount, true);
  ranks.run(4, as_void(second), out, kCount, true);
  EXPECT_EQ(ranks.engine(0).buffer_states(), 3u);
  EXPECT_EQ(ranks.engine(1).buffer_states(), 3u);
}

}  // namespace
}  // namespace sketchccl::coll
