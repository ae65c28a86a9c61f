#include "src/interpose/nccl_search_path.h"

#include <climits>
#include <cstdlib>
#include <iterator>
#include <set>

namespace sketchccl::interpose {
namespace {

// Where distributions and NVIDIA's packages put libnccl.so.2 (what ld.so.cache usually lists).
constexpr const char* kSystemDirs[] = {"/usr/lib/x86_64-linux-gnu",
                                       "/usr/lib/aarch64-linux-gnu",
                                       "/usr/lib/powerpc64le-linux-gnu",
                                       "/usr/lib64",
                                       "/usr/lib",
                                       "/usr/local/lib",
                                       "/usr/local/lib64"};

}  // namespace

std::vector<std::string> search_path_candidates(const std::string& soname,
                                                const std::string& ld_library_path) {
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= ld_library_path.size()) {
    size_t end = ld_library_path.find(':', start);
    if (end == std::string::npos) end = ld_library_path.size();
    if (end > start) dirs.push_back(ld_library_path.substr(start, end - start));
    start = end + 1;
  }
  dirs.insert(dirs.end(), std::begin(kSystemDirs), std::end(kSystemDirs));
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + soname;
    char real[PATH_MAX];
    if (realpath(path.c_str(), real) == nullptr) continue;  // absent (or unreadable folder)
    if (seen.insert(real).second) out.push_back(path);
  }
  return out;
}

}  // namespace sketchccl::interpose
