#include "tools/library_needs.h"

#include <elf.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "sketchccl_build_config.h"

namespace sketchccl::tools {
namespace {

// Reads a T at offset of data, or false when it would run past the end.
template <typename T>
bool read_at(const std::vector<char>& data, size_t offset, T* out) {
  if (offset > data.size() || data.size() - offset < sizeof(T)) return false;
  std::memcpy(out, data.data() + offset, sizeof(T));
  return true;
}

// The NUL-terminated string at offset of the string table section, or "" when out of bounds.
std::string string_at(const std::vector<char>& data, const Elf64_Shdr& strtab, size_t offset) {
  if (offset >= strtab.sh_size || strtab.sh_offset + strtab.sh_size > data.size()) return "";
  const char* begin = data.data() + strtab.sh_offset + offset;
  return std::string(begin, strnlen(begin, strtab.sh_size - offset));
}

// "GLIBC_2.17" -> {2, 17}; components past the prefix, compared as numbers.
std::vector<long> version_numbers(const std::string& version, const std::string& prefix) {
  std::vector<long> parts;
  const char* p = version.c_str() + prefix.size();
  while (*p) {
    char* end = nullptr;
    parts.push_back(std::strtol(p, &end, 10));
    if (end == p) break;
    p = *end == '.' ? end + 1 : end;
  }
  return parts;
}

// The SketchCCL library this sketchccl-info belongs to: the build tree's, or the installed one.
std::string find_library() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string dir(exe);
  dir.erase(dir.rfind('/'));
  for (const std::string& candidate :
       {dir + "/../libsketchccl.so", dir + "/" SKETCHCCL_BIN_TO_LIBDIR "/libsketchccl.so." +
                                         std::to_string(SKETCHCCL_VERSION_MAJOR)}) {
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

bool read_version_needs(const std::string& path, std::vector<VersionNeed>* needs,
                        std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path;
    return false;
  }
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr eh;
  if (!read_at(data, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64) {
    *error = path + " is not a 64-bit ELF file";
    return false;
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i) {
    if (!read_at(data, eh.e_shoff + i * eh.e_shentsize, &sections[i])) {
      *error = path + ": truncated section headers";
      return false;
    }
  }
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_GNU_verneed || s.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strtab = sections[s.sh_link];
    size_t need_at = s.sh_offset;
    for (unsigned i = 0; i < s.sh_info; ++i) {
      Elf64_Verneed vn;
      if (!read_at(data, need_at, &vn)) break;
      std::string file = string_at(data, strtab, vn.vn_file);
      size_t aux_at = need_at + vn.vn_aux;
      for (unsigned j = 0; j < vn.vn_cnt; ++j) {
        Elf64_Vernaux va;
        if (!read_at(data, aux_at, &va)) break;
        needs->push_back({file, string_at(data, strtab, va.vna_name)});
        if (va.vna_next == 0) break;
        aux_at += va.vna_next;
      }
      if (vn.vn_next == 0) break;
      need_at += vn.vn_next;
    }
  }
  return true;
}

std::string highest_version(const std::vector<VersionNeed>& needs, const std::string& prefix) {
  std::string best;
  for (const VersionNeed& n : needs) {
    if (n.version.compare(0, prefix.size(), prefix) != 0) continue;
    if (prefix == "GLIBC_" && n.version.compare(0, 8, "GLIBC_PR") == 0) continue;  // GLIBC_PRIVATE
    if (best.empty() || version_numbers(n.version, prefix) > version_numbers(best, prefix))
      best = n.version;
  }
  return best;
}

void print_library_needs() {
  std::printf("Library:\n");
  std::string path = find_library();
  if (path.empty()) {
    std::printf("  libsketchccl.so not found next to this sketchccl-info\n");
    return;
  }
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved)) path = resolved;
  std::vector<VersionNeed> needs;
  std::string error;
  if (!read_version_needs(path, &needs, &error)) {
    std::printf("  %s\n", error.c_str());
    return;
  }
  std::string glibc = highest_version(needs, "GLIBC_");
  std::string glibcxx = highest_version(needs, "GLIBCXX_");
  std::printf("  %s\n", path.c_str());
  std::printf("  needs glibc %s or newer, libstdc++ %s (portable build: %s)\n",
              glibc.empty() ? "(any)" : glibc.substr(6).c_str(),
              glibcxx.empty() ? "linked in" : (glibcxx + " or newer").c_str(),
              SKETCHCCL_PORTABLE ? "yes" : "no");
}

}  // namespace sketchccl::tools
