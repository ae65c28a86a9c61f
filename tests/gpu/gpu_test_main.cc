// gtest main of the GPU test binaries without their own: exit 77 when every case skipped.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_main.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
