#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/coll/accuracy.h"
#include "src/coll/carry.h"
#include "src/coll/ring.h"

namespace sketchccl::coll {
namespace {

bool sampled(const std::vector<uint64_t>& bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

// Every sampled position falls in exactly the slice that holds it, in sample order, and the
// values put behind a packet come back out unchanged.
TEST(SampleTrailer, PlacesEverySampleInItsSliceAndCarriesItsValues) {
  for (size_t count : {size_t{1000}, size_t{65536}, size_t{100003}}) {
    for (int p : {2, 3, 8}) {
      std::vector<uint64_t> bits;
      sample_bitmap(7, 3, count, &bits, 64);
      const size_t m = sample_count(count, 64);
      std::vector<float> own(m);
      for (size_t i = 0; i < m; ++i)
        own[i] = static_cast<float>(i) + 0.5f;
      SampleCarry sample;
      sample.bits = bits.data();
      sample.own = own.data();
      sample.m = m;
      const RingPlan plan(count, p, 1000, kRingChunkAlign);
      SampleTrailer trailer;
      ASSERT_TRUE(trailer.place(sample, plan, p).ok()) << count << " " << p;
      size_t next = 0;
      for (int c = 0; c < p; ++c) {
        for (int j = 0; j < plan.max_slices(); ++j) {
          size_t off = 0, n = 0;
          plan.slice(c, j, &off, &n);
          size_t k = 0;
          for (size_t i = off; i < off + n; ++i)
            k += sampled(bits, i) ? 1 : 0;
          ASSERT_EQ(trailer.count(c, j), k) << c << " " << j;
          ASSERT_EQ(trailer.first(c, j), next) << c << " " << j;
          next += k;
          const size_t packet = n == 0 ? 0 : 13;  // an odd packet size: the trailer is unaligned
          ASSERT_EQ(trailer.message_bytes(packet, c, j), n == 0 ? 0 : packet + 4 * k);
          std::vector<uint8_t> msg(trailer.message_bytes(packet, c, j), 0);
          trailer.put(c, j, own.data() + trailer.first(c, j), msg.data(), packet);
          std::vector<float> back(k, -1.0f);
          trailer.get(c, j, msg.data(), packet, back.data());
          for (size_t i = 0; i < k; ++i)
            ASSERT_EQ(back[i], own[trailer.first(c, j) + i]);
        }
      }
      EXPECT_EQ(next, m);
    }
  }
}

// A sample that is not the slices' (another count, another cut) is refused, not read past.
TEST(SampleTrailer, RefusesASampleThatIsNotTheSlices) {
  std::vector<uint64_t> bits;
  sample_bitmap(7, 3, 4096, &bits, 64);
  SampleCarry sample;
  sample.bits = bits.data();
  sample.m = sample_count(4096, 64) + 1;
  SampleTrailer trailer;
  const Status st = trailer.place(sample, RingPlan(4096, 4, 256), 4);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("does not match"), std::string::npos) << st.message();
}

// Before place(): no trailer, the message is the packet alone.
TEST(SampleTrailer, WithoutASampleTheMessageIsThePacket) {
  SampleTrailer trailer;
  EXPECT_EQ(trailer.count(1, 2), 0u);
  EXPECT_EQ(trailer.message_bytes(100, 1, 2), 100u);
  EXPECT_EQ(trailer.message_bytes(0, 1, 2), 0u);
}

}  // namespace
}  // namespace sketchccl::coll
