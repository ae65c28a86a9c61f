// The hierarchical ReduceScatter's regrouping (hierarchy.h): for every placement of equal nodes,
// each rank's own chunk is the one its rail's ReduceScatter leaves it (position local·N + node),
// the rail's order is the rail ring's, and the regrouping is a permutation of the chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "src/coll/hierarchy.h"

namespace sketchccl::coll {
namespace {

struct Placement {
  const char* name;
  int nodes, per_node;
  std::function<uint64_t(int)> node_of;  // the host id of each rank
};

TEST(RailChunks, EveryRankGetsItsOwnChunkOnEveryPlacement) {
  const std::vector<Placement> placements = {
      {"2x2 by node", 2, 2, [](int r) { return uint64_t(r / 2); }},
      {"3x2 by node", 3, 2, [](int r) { return uint64_t(r / 2); }},
      {"2x4 by node", 2, 4, [](int r) { return uint64_t(r / 4); }},
      {"2x2 interleaved", 2, 2, [](int r) { return uint64_t(r % 2); }},
      {"3x3 interleaved", 3, 3, [](int r) { return uint64_t(100 + r % 3); }},
      {"2x3 scattered", 2, 3, [](int r) { return uint64_t((r * 5 + 1) % 6 < 3 ? 7 : 9); }},
  };
  for (const Placement& p : placements) {
    SCOPED_TRACE(p.name);
    const int nranks = p.nodes * p.per_node;
    std::vector<uint64_t> ids(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r)
      ids[static_cast<size_t>(r)] = p.node_of(r);
    std::vector<int> positions;
    for (int g = 0; g < nranks; ++g) {
      const Topology t = make_topology(g, ids);
      ASSERT_TRUE(t.hierarchical());
      const RailChunks chunks(t);
      ASSERT_EQ(chunks.nodes(), p.nodes);
      ASSERT_EQ(chunks.local_ranks(), p.per_node);
      EXPECT_EQ(chunks.chunk_of(t.local, t.node), g);
      for (int n = 0; n < p.nodes; ++n)
        EXPECT_EQ(chunks.chunk_of(t.local, n), t.rail_ranks[static_cast<size_t>(n)]);
      if (g == 0) {
        for (int pos = 0; pos < nranks; ++pos)
          positions.push_back(chunks.chunk_at(pos));
      }
    }
    std::sort(positions.begin(), positions.end());
    for (int pos = 0; pos < nranks; ++pos)
      EXPECT_EQ(positions[static_cast<size_t>(pos)], pos);
  }
}

// The device ReduceScatter in front of NCCL reduces each node's chunks in place of the input only
// when the node's ranks are consecutive, in local order; any other placement is not.
TEST(RailChunks, BlocksByNodeOnlyWhenEachNodesRanksAreConsecutive) {
  const std::vector<std::pair<Placement, bool>> cases = {
      {{"2x2 by node", 2, 2, [](int r) { return uint64_t(r / 2); }}, true},
      {{"3x4 by node", 3, 4, [](int r) { return uint64_t(50 - r / 4); }}, true},
      {{"2x2 interleaved", 2, 2, [](int r) { return uint64_t(r % 2); }}, false},
      {{"2x3 scattered", 2, 3, [](int r) { return uint64_t((r * 5 + 1) % 6 < 3 ? 7 : 9); }}, false},
      {{"2x2 first and last together", 2, 2, [](int r) { return uint64_t(r == 0 || r == 3); }},
       false},
  };
  for (const auto& [p, blocks] : cases) {
    SCOPED_TRACE(p.name);
    const int nranks = p.nodes * p.per_node;
    std::vector<uint64_t> ids(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r)
      ids[static_cast<size_t>(r)] = p.node_of(r);
    for (int g = 0; g < nranks; ++g) {
      const Topology t = make_topology(g, ids);
      ASSERT_TRUE(t.hierarchical());
      EXPECT_EQ(RailChunks(t).blocks_by_node(), blocks);
    }
  }
}

}  // namespace
}  // namespace sketchccl::coll
