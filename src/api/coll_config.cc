#include "src/api/coll_config.h"

#include <cstring>
#include <set>
#include <utility>

namespace sketchccl::api {
namespace {

// NCCL 2.32.3's layout, whatever nccl.h this is built against (2.31.2's is its first 64 bytes).
struct CollConfigV23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs;
  int maxCTAs;
  int nvlsCTAs;
  int cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection;
  int CTAPolicy;
  uint64_t userProfilerTag;
  void* launchCompletionEvent;
};
static_assert(sizeof(void*) != 8 || sizeof(CollConfigV23200) == 72, "NCCL 2.32.3: 72 bytes");
static_assert(sizeof(void*) != 8 || offsetof(CollConfigV23200, launchCompletionEvent) == 64,
              "NCCL 2.31.2's config is the first 64 bytes");

constexpr unsigned int kApiMagic = 0xcafebeef;
constexpr unsigned int kFirstVersion = 23100;  // NCCL_VERSION(2, 31, 0)
constexpr size_t kHeader = offsetof(CollConfigV23200, ext);
// NCCL 2.31.2's struct, the smallest a caller of a *Config call can have.
constexpr size_t kV23100Size = offsetof(CollConfigV23200, launchCompletionEvent);
constexpr int kMaxExt = 64;  // a longer list is taken for a circular one

// The defaults of NCCL_COLLCONFIG_INITIALIZER, for the fields past the caller's size.
CollConfigV23200 defaults() {
  CollConfigV23200 c{};
  c.minCTAs = c.maxCTAs = c.nvlsCTAs = c.cgaClusterSize = NCCL_CONFIG_UNDEF_INT;
  c.forceAlgSelection = 1;
  c.CTAPolicy = NCCL_CONFIG_UNDEF_INT;
  return c;
}

std::string needs_nccl(const CollConfigV23200& c) {
  if (c.algSelection != nullptr && c.forceAlgSelection != 0) {
    return std::string("the config forces algSelection '") + c.algSelection + "'";
  }
  const std::pair<const char*, int> ctas[] = {{"minCTAs", c.minCTAs},
                                              {"maxCTAs", c.maxCTAs},
                                              {"nvlsCTAs", c.nvlsCTAs},
                                              {"cgaClusterSize", c.cgaClusterSize},
                                              {"CTAPolicy", c.CTAPolicy}};
  for (const auto& [name, value] : ctas) {
    if (value != NCCL_CONFIG_UNDEF_INT) return std::string("the config sets ") + name;
  }
  if (c.launchCompletionEvent != nullptr) return "the config asks for a launch completion event";
  return "";
}

// SketchCCL's options in the `ext` list; false with `why` when the list or an option is bad.
bool read_ext(const ncclConfigExt_t* ext, CollOptions* out, std::string* why) {
  std::set<std::pair<int, int>> keys;
  int n = 0;
  for (const ncclConfigExt_t* e = ext; e != nullptr; e = e->next) {
    if (++n > kMaxExt) {
      *why = "its ext list is longer than 64 entries (circular?)";
      return false;
    }
    if (!keys.insert({e->key.vendorId, e->key.optionId}).second) {
      *why = "its ext list repeats a key";
      return false;
    }
    if (e->key.vendorId != kSketchcclVendorId) continue;  // another vendor's
    switch (e->key.optionId) {
      case kOptionCodec:
        if (e->val.s == nullptr || !kernels::codec_from_name(e->val.s, &out->codec)) {
          *why = std::string("SketchCCL's codec option names no codec ('") +
                 (e->val.s != nullptr ? e->val.s : "NULL") + "')";
          return false;
        }
        out->has_codec = true;
        break;
      case kOptionExact:
        out->exact = e->val.i != 0;
        break;
      default:
        *why = "SketchCCL has no option " + std::to_string(e->key.optionId);
        return false;
    }
  }
  return true;
}

}  // namespace

CollOptions read_coll_config(const ncclCollConfig_t* config) {
  CollOptions out;
  if (config == nullptr) return out;
  CollConfigV23200 c = defaults();
  std::memcpy(&c, config, kHeader);
  if (c.size < kV23100Size) {
    out.invalid = "ncclCollConfig_t's size " + std::to_string(c.size) +
                  " is smaller than NCCL 2.31's (" + std::to_string(kV23100Size) + ")";
  } else if (c.magic != kApiMagic) {
    out.invalid = "ncclCollConfig_t is not initialized (NCCL_COLLCONFIG_INITIALIZER)";
  } else if (c.version < kFirstVersion) {
    out.invalid = "ncclCollConfig_t's version " + std::to_string(c.version) + " is older than 2.31";
  }
  if (!out.invalid.empty()) return out;
  const size_t n = c.size < sizeof c ? c.size : sizeof c;
  std::memcpy(reinterpret_cast<char*>(&c) + kHeader,
              reinterpret_cast<const char*>(config) + kHeader, n - kHeader);
  // 2.31.2's struct ends before launchCompletionEvent, which keeps its default (NULL).
  out.needs_nccl = needs_nccl(c);
  std::string why;
  if (!read_ext(c.ext, &out, &why)) {
    out.invalid = "ncclCollConfig_t: " + why;
  }
  return out;
}

}  // namespace sketchccl::api
