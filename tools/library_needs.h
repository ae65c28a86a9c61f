// The symbol versions (glibc, libstdc++) that the SketchCCL library found near sketchccl-info
// needs.
#ifndef SKETCHCCL_TOOLS_LIBRARY_NEEDS_H_
#define SKETCHCCL_TOOLS_LIBRARY_NEEDS_H_

#include <string>
#include <vector>

namespace sketchccl::tools {

// One DT_VERNEED entry: a library and a version of it that an ELF object needs.
struct VersionNeed {
  std::string file;     // "libc.so.6"
  std::string version;  // "GLIBC_2.17"
};

// Reads the version needs of an ELF file; false (and why, in *error) when it cannot.
bool read_version_needs(const std::string& path, std::vector<VersionNeed>* needs,
                        std::string* error);

// The highest "PREFIX<n.n.n>" version among needs ("" when none), compared numerically.
std::string highest_version(const std::vector<VersionNeed>& needs, const std::string& prefix);

// Prints a "Library:" section: where the library is and the glibc and libstdc++ it needs.
void print_library_needs();

}  // namespace sketchccl::tools

#endif  // SKETCHCCL_TOOLS_LIBRARY_NEEDS_H_
