// A communicator's blocking mode as NCCL 2.28.9 decides it (parseCommConfig, copyCommConfig and
// envConfigOverride in src/init.cc): NCCL_COMM_BLOCKING=0|1 wins over the config.
#include "src/interpose/comm_side.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace sketchccl::interpose {
namespace {

struct Env {
  explicit Env(const char* value) {
    if (value == nullptr) {
      unsetenv("NCCL_COMM_BLOCKING");
    } else {
      setenv("NCCL_COMM_BLOCKING", value, 1);
    }
  }
  ~Env() { unsetenv("NCCL_COMM_BLOCKING"); }
};

ncclConfig_t config_with(int blocking) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = blocking;
  return c;
}

TEST(ConfigNonblocking, TheConfigDecidesWithoutTheEnvironment) {
  Env env(nullptr);
  ncclConfig_t nb = config_with(0), b = config_with(1), unset = NCCL_CONFIG_INITIALIZER;
  EXPECT_TRUE(config_nonblocking(&nb, false));
  EXPECT_FALSE(config_nonblocking(&b, true));
  EXPECT_FALSE(config_nonblocking(&unset, true));  // NCCL's default: blocking
  EXPECT_TRUE(config_nonblocking(nullptr, true));  // a split inherits its parent's
  EXPECT_FALSE(config_nonblocking(nullptr, false));
  EXPECT_FALSE(nonblocking_by_default());
}

TEST(ConfigNonblocking, NcclCommBlockingOverridesTheConfig) {
  {
    Env env("0");
    ncclConfig_t b = config_with(1);
    EXPECT_TRUE(config_nonblocking(&b, false));
    EXPECT_TRUE(config_nonblocking(nullptr, false));
    EXPECT_TRUE(nonblocking_by_default());
  }
  {
    Env env("1");
    ncclConfig_t nb = config_with(0);
    EXPECT_FALSE(config_nonblocking(&nb, true));
    EXPECT_FALSE(config_nonblocking(nullptr, true));
  }
  {
    Env env("7");  // NCCL ignores other values
    ncclConfig_t nb = config_with(0);
    EXPECT_TRUE(config_nonblocking(&nb, false));
  }
}

TEST(ConfigNonblocking, AnOlderCallersShorterConfigIsNotReadPastItsSize) {
  Env env(nullptr);
  ncclConfig_t c = config_with(0);
  c.size = offsetof(ncclConfig_t, blocking);  // ends before the field
  EXPECT_FALSE(config_nonblocking(&c, true));
}

}  // namespace
}  // namespace sketchccl::interpose
