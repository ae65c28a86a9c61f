// The ring checks its tag layout against what the transport says it carries.
#include <gtest/gtest.h>

#include <string>

#include "sketchccl_build_config.h"
#include "src/coll/ring.h"
#if SKETCHCCL_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace sketchccl::coll {
namespace {

// A transport that carries few tag bits; the ring must refuse it before sending anything.
class NarrowTagTransport final : public transport::Transport {
 public:
  const char* name() const override { return "narrow"; }
  transport::TransportProperties properties() const override {
    transport::TransportProperties p;
    p.tag_bits = 32;
    return p;
  }
  transport::Blob address() const override { return {}; }
  Status connect(int, const transport::Blob&) override { return Status::Ok(); }
  Status isend(int, uint64_t, const void*, size_t, transport::RequestId*) override {
    ++posts;
    return Status(Code::kInternalError, "unexpected send");
  }
  Status irecv(int, uint64_t, void*, size_t, transport::RequestId*) override {
    ++posts;
    return Status(Code::kInternalError, "unexpected receive");
  }
  Status progress() override { return Status::Ok(); }
  Status test(transport::RequestId, bool* done, size_t*) override {
    *done = true;
    return Status::Ok();
  }
  void close() override {}
  int posts = 0;
};

class NoOps final : public SliceOps {
 public:
  size_t packet_bytes(size_t, size_t) const override { return 0; }
  Status encode(size_t, size_t, int, void*, size_t) override { return Status::Ok(); }
  Status step(size_t, size_t, int, const void*, size_t, void*, size_t) override {
    return Status::Ok();
  }
  Status decode_start(size_t, size_t, const void*, size_t) override { return Status::Ok(); }
};

#if SKETCHCCL_HAVE_UCX
// A narrower UCX tag is a build error here, not only the ring's refusal at run time.
static_assert(kRingTagBits <= transport::kUcxTagBits, "the ring's tags must fit UCX's");
#endif

TEST(RingTag, FieldsFillExactlyTheDeclaredWidth) {
  EXPECT_EQ(ring_tag(0xff, 0x1f, 0xfff, 0x7ffff), (uint64_t{1} << kRingTagBits) - 1);
  EXPECT_EQ(ring_tag(0, 16, 0, 0), uint64_t{16} << 31);  // phases above 15 keep their own bit
  EXPECT_EQ(ring_tag(0, 0, 0, 1), 1u);
  EXPECT_EQ(ring_tag(1, 0, 0, 0), uint64_t{1} << (kRingTagBits - 8));
}

TEST(RingTag, ATransportWithTooFewTagBitsIsRefusedClearly) {
  NarrowTagTransport t;
  NoOps ops;
  CommLink link;
  link.transport = &t;
  link.rank = 0;
  link.nranks = 2;
  Status st = ring_allreduce(link, 1024, 256, 2, ops, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("need 44 bits but the narrow transport carries only 32"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(t.posts, 0);
}

TEST(RingTag, LinkTimeoutDefaultsToTheTable) {
  CommLink link;
  EXPECT_EQ(link.timeout_s, Config::defaults().get_double(Var::kTimeout));
}

}  // namespace
}  // namespace sketchccl::coll
