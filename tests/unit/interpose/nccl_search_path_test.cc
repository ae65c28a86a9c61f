// The libnccl.so.2 files the JAX shim tries by path: LD_LIBRARY_PATH's folders in order, empty
// entries and absent files skipped, a file reached twice (a link, a repeated folder) tried once.
#include "src/interpose/nccl_search_path.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace sketchccl::interpose {
namespace {

class SearchPath : public testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/sccl_search_path_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    for (const char* d : {"/a", "/b", "/c"})
      ASSERT_EQ(mkdir((root_ + d).c_str(), 0700), 0);
    std::ofstream(root_ + "/a/libx.so.9") << "a";
    std::ofstream(root_ + "/c/libx.so.9") << "c";
    ASSERT_EQ(symlink((root_ + "/a/libx.so.9").c_str(), (root_ + "/b/libx.so.9").c_str()), 0);
  }
  void TearDown() override {
    for (const char* f : {"/a/libx.so.9", "/b/libx.so.9", "/c/libx.so.9"})
      unlink((root_ + f).c_str());
    for (const char* d : {"/a", "/b", "/c"})
      rmdir((root_ + d).c_str());
    rmdir(root_.c_str());
  }
  std::string root_;
};

TEST_F(SearchPath, FoldersInOrderEachFileOnce) {
  const std::string path =
      "::" + root_ + "/missing:" + root_ + "/c:" + root_ + "/b:" + root_ + "/a:" + root_ + "/c:";
  const auto got = search_path_candidates("libx.so.9", path);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], root_ + "/c/libx.so.9");
  EXPECT_EQ(got[1], root_ + "/b/libx.so.9");  // the link; /a's file is the same one
}

TEST_F(SearchPath, NothingWhereNothingIs) {
  EXPECT_TRUE(search_path_candidates("libx_absent.so.9", root_ + "/a").empty());
  EXPECT_TRUE(search_path_candidates("libx_absent.so.9", "").empty());
}

}  // namespace
}  // namespace sketchccl::interpose
