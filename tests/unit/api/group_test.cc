#include "src/api/group.h"

#include <gtest/gtest.h>

#include <string>

namespace sketchccl::api {
namespace {

struct Counts {
  int launched = 0;
  int simulated = 0;
  bool active_while_launching = false;
};

group::DeferredCall call_counting(Counts* c) {
  return {[c] {
            c->launched++;
            c->active_while_launching = group::active();
            return Status::Ok();
          },
          [c] {
            c->simulated++;
            return ncclSuccess;
          }};
}

TEST(Group, DeferredCallsLaunchAtTheOutermostEndWhileStillActive) {
  Counts c;
  group::start();
  group::start();
  group::defer_call(call_counting(&c));
  EXPECT_TRUE(group::end().ok());
  EXPECT_EQ(c.launched, 0);  // an inner end launches nothing
  EXPECT_TRUE(group::end().ok());
  EXPECT_EQ(c.launched, 1);
  EXPECT_TRUE(c.active_while_launching);  // work submitted then is deferred, not waited for
  EXPECT_FALSE(group::active());
}

TEST(Group, SimulateEndEndsTheGroupAndLaunchesNothing) {
  Counts c;
  group::start();
  group::defer_call(call_counting(&c));
  group::defer_call(call_counting(&c));
  Status waited = Status::Ok();
  EXPECT_EQ(group::simulate_end(&waited), ncclSuccess);
  EXPECT_TRUE(waited.ok());
  EXPECT_EQ(c.simulated, 2);
  EXPECT_EQ(c.launched, 0);
  EXPECT_FALSE(group::active());  // the depth does not leak
  // The next group starts empty.
  group::start();
  EXPECT_TRUE(group::end().ok());
  EXPECT_EQ(c.launched, 0);
}

TEST(Group, SimulateEndOutsideAGroupIsTheRealNcclsToAnswer) {
  Status waited = Status(Code::kInternalError, "unset");
  EXPECT_EQ(group::simulate_end(&waited), ncclSuccess);
  EXPECT_TRUE(waited.ok());
  EXPECT_FALSE(group::active());
}

TEST(Group, ALaunchFailureIsTheGroupsResult) {
  group::start();
  group::defer_call({[] { return Status(Code::kInvalidArgument, "bad"); }, {}});
  Status st = group::end();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_FALSE(group::active());
}

}  // namespace
// A staged device call's stream operations: at the group's end, every launched call's head
// before any tail, and a call whose head failed gets no tail; outside a group, head then tail.
TEST(Group, StreamOperationsRunEveryHeadBeforeAnyTail) {
  std::string order;
  auto ops = [&order](char id, bool head_fails) {
    return group::DeferredCall{[&order, id, head_fails] {
                                 return group::stream_ops(
                                     [&order, id, head_fails] {
                                       order += id;
                                       order += 'h';
                                       return head_fails ? Status(Code::kUnhandledCudaError, "x")
                                                         : Status::Ok();
                                     },
                                     [&order, id] {
                                       order += id;
                                       order += 't';
                                       return Status::Ok();
                                     });
                               },
                               {}};
  };
  group::start();
  group::defer_call(ops('a', false));
  group::defer_call(ops('b', true));
  group::defer_call(ops('c', false));
  EXPECT_EQ(group::end().code(), Code::kUnhandledCudaError);  // b's head: the group's result
  EXPECT_EQ(order, "ahbhchatct");
  order.clear();
  EXPECT_TRUE(group::stream_ops(
                  [&order] {
                    order += "h";
                    return Status::Ok();
                  },
                  [&order] {
                    order += "t";
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(order, "ht");
}

}  // namespace sketchccl::api
