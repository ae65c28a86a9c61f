#include "src/coll/schedule_choice.h"

namespace sketchccl::coll {

bool two_shot_applies(kernels::CodecId codec, bool backend_sums) {
  const kernels::CodecInfo* ci = kernels::codec_info(codec);
  if (ci == nullptr || !backend_sums || !ci->lossy) return false;
  return ci->family == kernels::CodecFamily::kLinear || ci->family == kernels::CodecFamily::kCasq;
}

Schedule choose_schedule(const Settings& s, kernels::CodecId codec, int nranks, size_t count,
                         bool backend_sums) {
  if (nranks < 2 || count == 0 || !two_shot_applies(codec, backend_sums)) return Schedule::kRing;
  switch (s.algo) {
    case Settings::Algo::kRing:
      return Schedule::kRing;
    case Settings::Algo::kTwoShot:
      return Schedule::kTwoShot;
    case Settings::Algo::kAuto:
      break;
  }
  // The same bytes as the ring, fewer message rounds (2 instead of 2 (P - 1)), and an error
  // that does not grow with P: two-shot wherever it applies.
  return Schedule::kTwoShot;
}

}  // namespace sketchccl::coll
