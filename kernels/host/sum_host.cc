#include <vector>

#include "kernels/sum.h"
#include "kernels/sum_impl.h"

namespace sketchccl::kernels {

Status decode_add(const CodecParams& p, const void* pkt, size_t pkt_bytes, float* sum, size_t n) {
  // The proxy thread's scratch: a slice's decoded values, reused across calls.
  thread_local std::vector<float> decoded;
  if (decoded.size() < n) decoded.resize(n);
  SCCL_RETURN_IF_ERROR(decode(p, pkt, pkt_bytes, decoded.data(), ElemType::kF32, n, 1.0f, nullptr));
  for (size_t i = 0; i < n; ++i)
    sum[i] = detail::sum_add(sum[i], decoded[i]);
  return Status::Ok();
}

}  // namespace sketchccl::kernels
