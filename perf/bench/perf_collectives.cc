#include "perf/bench/perf_collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace perfbench {
namespace {

double reduced(const Reference& ref, size_t i, size_t, int p, ncclRedOp_t op) {
  return op == ncclAvg ? ref.sum[i] / p : ref.sum[i];
}

const Collective kCollectives[] = {
    {"allreduce", "AllReduce", 2.0, "2(P-1)/P", true,
     [](size_t elems, size_t, size_t* count, size_t* send, size_t* recv) {
       *count = *send = *recv = elems;
     },
     [](const Nccl& n, const void* s, void* r, size_t c, ncclDataType_t t, ncclRedOp_t op,
        ncclComm_t comm, cudaStream_t st) { return n.AllReduce(s, r, c, t, op, comm, st); },
     reduced},
    // The input's size, a multiple of P elements; each rank receives count / P (rank 0: the
    // first chunk of the sum).
    {"reduce_scatter", "ReduceScatter", 1.0, "(P-1)/P", true,
     [](size_t elems, size_t p, size_t* count, size_t* send, size_t* recv) {
       *send = elems / p * p;
       *count = *recv = elems / p;
     },
     [](const Nccl& n, const void* s, void* r, size_t c, ncclDataType_t t, ncclRedOp_t op,
        ncclComm_t comm, cudaStream_t st) { return n.ReduceScatter(s, r, c, t, op, comm, st); },
     reduced},
    // The output's size, a multiple of P elements; each rank sends count = size / P, and rank
    // q's shard lands at q * count.
    {"allgather", "AllGather", 1.0, "P-1", false,
     [](size_t elems, size_t p, size_t* count, size_t* send, size_t* recv) {
       *count = *send = elems / p;
       *recv = elems / p * p;
     },
     [](const Nccl& n, const void* s, void* r, size_t c, ncclDataType_t t, ncclRedOp_t,
        ncclComm_t comm, cudaStream_t st) { return n.AllGather(s, r, c, t, comm, st); },
     [](const Reference& ref, size_t i, size_t count, int, ncclRedOp_t) {
       return static_cast<double>(ref.inputs[i / count][i % count]);
     }},
};

bool is_allgather(const Collective& coll) {
  return std::strcmp(coll.name, "allgather") == 0;
}

}  // namespace

const Collective& collective(const std::string& name) {
  for (const Collective& c : kCollectives) {
    if (name == c.name) return c;
  }
  perfinputs::input_error("no collective '%s'", name.c_str());
}

const char* codec_variable(const Collective& coll) {
  return is_allgather(coll) ? "SKETCHCCL_ALLGATHER_CODEC" : "SKETCHCCL_CODEC";
}

Reference exact_reference(const Collective& coll, perfinputs::Inputs& inputs, int nranks,
                          size_t count) {
  Reference exact;
  if (coll.reduces) exact.sum.assign(count, 0.0);
  std::vector<float> other;
  for (int r = 0; r < nranks; ++r) {
    inputs.generate(r, count, &other);
    if (!coll.reduces) {
      exact.inputs.push_back(other);
      continue;
    }
    for (size_t i = 0; i < count; ++i)
      exact.sum[i] += other[i];
  }
  return exact;
}

OutputError output_error(const Collective& coll, const Reference& exact, const char* out,
                         size_t out_count, size_t count, int nranks, ncclDataType_t type,
                         ncclRedOp_t op) {
  double err = 0, ref = 0, maxerr = 0, maxref = 0;
  for (size_t i = 0; i < out_count; ++i) {
    double e = coll.exact(exact, i, count, nranks, op);
    e = perfinputs::round_to(type, static_cast<float>(e));  // what the buffer type can hold
    double y = perfinputs::from_buffer(type, out, i);
    double d = std::isfinite(y) ? y - e : INFINITY;
    err += d * d;
    ref += e * e;
    maxerr = std::max(maxerr, std::fabs(d));
    maxref = std::max(maxref, std::fabs(e));
  }
  OutputError r;
  r.nmse = ref > 0 ? err / ref : err;
  r.maxrel = maxref > 0 ? maxerr / maxref : maxerr;
  return r;
}

bool wire_counters(const Nccl& nccl, ncclComm_t comm, const Collective& coll, WireCounters* out) {
  if (nccl.CommGetStats == nullptr) return false;
  sketchcclCommStats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (nccl.CommGetStats(comm, &s) != 0) return false;
  if (is_allgather(coll)) {
    const char* codec = std::getenv("SKETCHCCL_ALLGATHER_CODEC");
    out->in = s.allgather_bytes_in;
    out->sent = s.allgather_bytes_sent;
    out->calls[codec != nullptr && *codec ? codec : "none"] = s.allgather_calls;
    return true;
  }
  out->in = s.bytes_in;
  out->sent = s.bytes_sent;
  for (int i = 0; i < s.num_codecs; ++i) {
    const sketchcclCodecAccuracy& a = s.accuracy[i];
    out->est_nmse_sum += a.estimated_nmse_mean * static_cast<double>(a.estimated_calls);
    out->est_calls += a.estimated_calls;
    out->sample_sent += a.sample_bytes_sent;
    out->calls[std::string(s.codecs[i].name, strnlen(s.codecs[i].name, sizeof s.codecs[i].name))] =
        s.codecs[i].calls;
  }
  return true;
}

WireFigures wire_figures(const WireCounters& before, const WireCounters& after) {
  WireFigures f;
  if (after.in <= before.in) return f;  // nothing of this size went through SketchCCL
  f.wire =
      static_cast<double>(after.sent - before.sent) / static_cast<double>(after.in - before.in);
  if (after.est_calls > before.est_calls) {
    f.est_nmse = (after.est_nmse_sum - before.est_nmse_sum) /
                 static_cast<double>(after.est_calls - before.est_calls);
  }
  uint64_t most = 0;
  for (const auto& [name, n] : after.calls) {
    const auto it = before.calls.find(name);
    const uint64_t d = n - (it == before.calls.end() ? 0 : it->second);
    if (d > most) most = d, f.codec = name;
  }
  if (after.sent > before.sent) {
    f.sample_wire = static_cast<double>(after.sample_sent - before.sample_sent) /
                    static_cast<double>(after.sent - before.sent);
  }
  return f;
}

}  // namespace perfbench
