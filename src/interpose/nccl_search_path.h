// Files named libnccl.so.2 along the loader's search path, by full path. Needed when SketchCCL
// itself is the object named libnccl.so.2 (the JAX/XLA shim): dlopen("libnccl.so.2") then
// answers with SketchCCL, so the real NCCL further along the path must be opened by its path.
#pragma once

#include <string>
#include <vector>

namespace sketchccl::interpose {

// `soname` in each folder of `ld_library_path` (colon-separated; empty entries skipped), then in
// the system library folders, in that order, each file that exists once (by its real path).
std::vector<std::string> search_path_candidates(const std::string& soname,
                                                const std::string& ld_library_path);

}  // namespace sketchccl::interpose
