// The bootstrap message parser: round trips, and every kind of malformed input is an error
// that names the problem.
#include "src/bootstrap/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace sketchccl;
using namespace sketchccl::bootstrap::wire;

namespace {

std::vector<uint8_t> body(const std::vector<uint8_t>& framed) {
  return std::vector<uint8_t>(framed.begin() + kFrameBytes, framed.end());
}

TEST(Wire, HelloRoundTripAndEveryTruncationFails) {
  Hello h;
  h.secret = 0x1234567890abcdefull;
  h.rank = 3;
  h.nranks = 8;
  h.config_hash = 42;
  h.blob = {1, 2, 3, 4, 5};
  std::vector<uint8_t> b = body(encode_hello(h));
  Hello out;
  ASSERT_TRUE(parse_hello(b.data(), b.size(), &out).ok());
  EXPECT_EQ(out.secret, h.secret);
  EXPECT_EQ(out.rank, 3u);
  EXPECT_EQ(out.nranks, 8u);
  EXPECT_EQ(out.config_hash, 42u);
  EXPECT_EQ(out.blob, h.blob);
  for (size_t n = 0; n < b.size(); ++n) {
    Status st = parse_hello(b.data(), n, &out);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << n;
    EXPECT_NE(st.message().find("truncated"), std::string::npos) << n << ": " << st.message();
  }
  b.push_back(0);
  EXPECT_NE(parse_hello(b.data(), b.size(), &out).message().find("trailing"), std::string::npos);
}

TEST(Wire, HelloFieldChecks) {
  Hello h;
  h.nranks = 0;
  std::vector<uint8_t> b = body(encode_hello(h));
  Hello out;
  EXPECT_NE(parse_hello(b.data(), b.size(), &out).message().find("rank count"), std::string::npos);
  h.nranks = 2;
  b = body(encode_hello(h));
  b[0] ^= 1;  // magic
  EXPECT_NE(parse_hello(b.data(), b.size(), &out).message().find("not a SketchCCL"),
            std::string::npos);
  b = body(encode_hello(h));
  b[4] = 9;  // version
  EXPECT_NE(parse_hello(b.data(), b.size(), &out).message().find("version"), std::string::npos);
  b = body(encode_hello(h));
  b[6] = kTypeTable;
  EXPECT_NE(parse_hello(b.data(), b.size(), &out).message().find("type"), std::string::npos);
  h.blob.assign(kMaxBlobBytes + 1, 0);
  b = body(encode_hello(h));
  EXPECT_FALSE(parse_hello(b.data(), b.size(), &out).ok());
  EXPECT_FALSE(parse_hello(nullptr, 5, &out).ok());
}

TEST(Wire, TableAndErrorReplies) {
  std::vector<std::vector<uint8_t>> blobs = {{1}, {}, {3, 3, 3}};
  std::vector<uint64_t> hashes = {7, 8, 9};
  std::vector<uint8_t> b = body(encode_table(blobs, hashes));
  Reply r;
  ASSERT_TRUE(parse_reply(b.data(), b.size(), &r).ok());
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.blobs, blobs);
  EXPECT_EQ(r.config_hashes, hashes);
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(parse_reply(b.data(), n, &r).ok()) << n;
  b = body(encode_error("rank 3 is outside [0, 2)"));
  ASSERT_TRUE(parse_reply(b.data(), b.size(), &r).ok());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "rank 3 is outside [0, 2)");
  // A table that claims more ranks than its bytes could hold.
  b = body(encode_table(blobs, hashes));
  b[8] = 0xff;
  b[9] = 0xff;
  EXPECT_FALSE(parse_reply(b.data(), b.size(), &r).ok());
}

}  // namespace
