// P socket transports over loopback, each connected to every other: the ranks of a ring test
// that runs its ranks as threads of one process.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "src/coll/ring.h"
#include "transport/transport.h"

namespace sketchccl::testutil {

// `wait`: SKETCHCCL_WAIT of the transports (null: the default).
inline std::vector<std::unique_ptr<transport::Transport>> loopback_transports(
    int p, double timeout_s, const char* wait = nullptr) {
  std::vector<std::unique_ptr<transport::Transport>> t;
  for (int r = 0; r < p; ++r) {
    transport::TransportOptions o;
    o.kind = "socket";
    o.rank = r;
    o.nranks = p;
    o.timeout_s = timeout_s;
    o.ifname = "lo";
    if (wait != nullptr) o.wait = wait;
    std::unique_ptr<transport::Transport> tr;
    Status st = transport::create_transport(o, &tr);
    EXPECT_TRUE(st.ok()) << st.to_string();
    t.push_back(std::move(tr));
  }
  for (int a = 0; a < p; ++a) {
    for (int b = 0; b < p; ++b) {
      if (a != b) {
        EXPECT_TRUE(t[a]->connect(b, t[b]->address()).ok());
      }
    }
  }
  return t;
}

// Rank `rank` of `nranks`'s link over `t` for the call numbered `op_seq`.
inline coll::CommLink ring_link(transport::Transport* t, int rank, int nranks, double timeout_s,
                                uint32_t op_seq) {
  coll::CommLink link;
  link.transport = t;
  link.rank = rank;
  link.nranks = nranks;
  link.timeout_s = timeout_s;
  link.op_seq = op_seq;
  return link;
}

}  // namespace sketchccl::testutil
