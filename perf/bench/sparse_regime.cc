// sketchccl-sparse-regime: where s2 pays against `sparse` (each support encoding) and the dense
// codecs (q8, q4, bf16), by density and support structure (i.i.d. positions, rows of 64
// contiguous non-zeros), for 4 and 8 ranks. Per case: the union support, the bytes one rank sends
// per input byte as auto's cost model counts them (coll/codec_choice.h; its estimate equals the
// engine's sends, tests/unit/coll/support_encoding_test.cc), the CPU time one rank spends in the
// codec work of the call on one core, and auto's choice. Markdown on stdout (docs/codecs.md,
// "When s2 pays"). Usage: sketchccl-sparse-regime [log2 count, default 21].
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/codec.h"
#include "kernels/sparse.h"
#include "src/coll/codec_choice.h"
#include "src/coll/support_encoding.h"

namespace sk = sketchccl::kernels;
namespace sc = sketchccl::coll;

namespace {

using Clock = std::chrono::steady_clock;

// The fastest of a few runs of f, in milliseconds.
template <typename F>
double time_ms(F f, int reps = 3) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

// P ranks' inputs: a union of about `density`, half of it common to every rank, the other half
// spread over the ranks; positions i.i.d. or whole rows of 64.
std::vector<std::vector<float>> make(size_t count, int p, double density, bool rows,
                                     uint64_t seed) {
  std::vector<std::vector<float>> x(p, std::vector<float>(count, 0.0f));
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t unit = rows ? 64 : 1;
  const size_t units = count / unit;
  const auto total = static_cast<size_t>(density * static_cast<double>(units));
  const size_t common = total / 2, own = (total - common) / static_cast<size_t>(p);
  auto put = [&](int r, size_t u) {
    for (size_t i = u * unit; i < (u + 1) * unit; ++i)
      x[r][i] = normal(g);
  };
  for (size_t k = 0; k < common; ++k) {
    const size_t u = g() % units;
    for (int r = 0; r < p; ++r)
      put(r, u);
  }
  for (int r = 0; r < p; ++r)
    for (size_t k = 0; k < own; ++k)
      put(r, g() % units);
  return x;
}

struct Case {
  size_t union_nz = 0, union_rows = 0;
  sc::WireEstimate wire;
  double cpu_sparse = 0, cpu_s2 = 0, cpu_q8 = 0;  // ms per rank
  sc::CodecChoice choice;
};

// One rank's codec work in a ring AllReduce: the encode of one chunk, P-1 steps of a chunk, the
// decode of every chunk (codecs); or the support, the compaction and the scatter (`sparse`).
double codec_cpu(sk::CodecId c, const std::vector<std::vector<float>>& x,
                 const std::vector<float>& sum, uint64_t union_nz, int p) {
  const size_t count = x[0].size(), chunk = count / static_cast<size_t>(p);
  sk::CodecParams cp;
  cp.codec = c;
  cp.seed = 1;
  cp.call = 1;
  cp.s2_rows = 3;
  cp.s2_counters = sk::s2_counters_for_support(union_nz / static_cast<uint64_t>(p), 3, 1.3);
  const size_t bytes = sk::packet_bytes(cp, chunk);
  std::vector<uint64_t> a(bytes / 8 + 1), b(bytes / 8 + 1);
  std::vector<float> y(chunk);
  // The partial sum a step receives: the other ranks' values (the sum is as sparse).
  if (!sk::encode(cp, sum.data(), sk::ElemType::kF32, chunk, a.data(), bytes).ok()) std::abort();
  return time_ms([&] {
    bool ok = sk::encode(cp, x[0].data(), sk::ElemType::kF32, chunk, b.data(), bytes).ok();
    for (int s = 1; s < p; ++s)
      ok &= sk::step(cp, a.data(), bytes, x[0].data(), sk::ElemType::kF32, chunk, b.data(), bytes)
                .ok();
    for (int s = 0; s < p; ++s)
      ok &=
          sk::decode(cp, a.data(), bytes, y.data(), sk::ElemType::kF32, chunk, 1.0f, nullptr).ok();
    if (!ok) std::abort();
  });
}

double sparse_cpu(sc::SupportEncoding e, const std::vector<std::vector<float>>& x,
                  const std::vector<uint64_t>& union_bits, size_t union_nz, int p) {
  const size_t count = x[0].size(), words = union_bits.size();
  std::vector<uint64_t> mine(words), rows(sc::row_bitmap_words(count)), expanded(words);
  std::vector<float> vals(union_nz + 64 * words), out(count);
  std::vector<uint32_t> la, lb, lm;
  return time_ms([&] {
    std::fill(mine.begin(), mine.end(), 0);
    sk::bitmap_build(x[0].data(), sk::ElemType::kF32, count, mine.data());
    switch (e) {
      case sc::SupportEncoding::kElementBitmap:
        for (int s = 1; s < p; ++s)  // P-1 ORs of a chunk
          sk::bitmap_or(mine.data(), union_bits.data(), count / static_cast<size_t>(p));
        break;
      case sc::SupportEncoding::kRowBitmap:
        sc::rows_of_bitmap(mine.data(), count, rows.data());
        sc::bitmap_of_rows(rows.data(), count, expanded.data());
        break;
      case sc::SupportEncoding::kIndexList:
        la.clear();
        sc::indices_in(mine.data(), 0, count, &la);
        lb.clear();
        sc::indices_in(union_bits.data(), 0, count / static_cast<size_t>(p), &lb);
        for (int s = 1; s < p; ++s)
          sc::merge_indices(la, lb, &lm);
        break;
    }
    sk::sparse_compact(union_bits.data(), count, x[0].data(), sk::ElemType::kF32, vals.data());
    sk::sparse_scatter(union_bits.data(), count, vals.data(), 1.0f, out.data(), sk::ElemType::kF32);
  });
}

Case run_case(size_t count, int p, double density, bool rows) {
  const auto x = make(count, p, density, rows, static_cast<uint64_t>(density * 1e7) + p);
  std::vector<float> sum(count, 0.0f);
  for (const auto& xr : x)
    for (size_t i = 0; i < count; ++i)
      sum[i] += xr[i];
  std::vector<uint64_t> bits(sk::bitmap_bytes(count) / 8, 0), one(bits.size());
  for (const auto& xr : x) {
    std::fill(one.begin(), one.end(), 0);
    sk::bitmap_build(xr.data(), sk::ElemType::kF32, count, one.data());
    sk::bitmap_or(bits.data(), one.data(), count);
  }
  Case c;
  c.union_nz = sk::bitmap_popcount(bits.data(), count);
  for (uint64_t w : bits)
    c.union_rows += w != 0;
  sc::CostModelParams m;
  m.count = count;
  m.nranks = p;
  sc::SupportHistory h;
  h.known = true;
  h.nonzeros = c.union_nz;
  h.rows = c.union_rows;
  c.wire = sc::estimate_wire(m, h);
  c.choice = sc::choose_auto(m, h);
  c.cpu_sparse =
      sparse_cpu(c.choice.codec == sk::CodecId::kSparse ? c.choice.support
                                                        : sc::SupportEncoding::kElementBitmap,
                 x, bits, c.union_nz, p);
  c.cpu_s2 = codec_cpu(sk::CodecId::kS2, x, sum, c.union_nz, p);
  c.cpu_q8 = codec_cpu(sk::CodecId::kQ8, x, sum, c.union_nz, p);
  return c;
}

// What s2 would send with fp32 counters (4 bytes each): its bitmap plus 1.3 x 4 bytes per
// non-zero, i.e. the s2 estimate with half of its counter bytes.
double s2_fp32(const Case& c, size_t count, int p) {
  const double ring = 2.0 * (p - 1) / p;
  const double bitmap = ring * static_cast<double>(count) / 8;
  return bitmap + (c.wire.s2 - bitmap) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int log2n = argc > 1 ? std::atoi(argv[1]) : 21;
  if (log2n < 12 || log2n > 26) {
    std::fprintf(stderr, "usage: %s [log2 count, 12..26]\n", argv[0]);
    return 2;
  }
  const size_t count = size_t(1) << log2n;
  std::printf(
      "Buffer of %zu fp32 elements; wire = bytes one rank sends / input bytes; CPU = ms "
      "one rank spends in codec work on one core (sparse: with the encoding it runs).\n\n",
      count);
  std::printf(
      "| P | support | union density | rows filled | sparse: bitmap / rows / indices | "
      "s2 (fp64) | s2 fp32 counters | q8 | q4 | bf16 | CPU ms sparse / s2 / q8 | auto |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const double in_bytes = 4.0 * static_cast<double>(count);
  for (int p : {4, 8}) {
    for (bool rows : {false, true}) {
      for (double d : {0.0001, 0.001, 0.01, 0.05, 0.1}) {
        const Case c = run_case(count, p, d, rows);
        sc::CostModelParams q4m, bf16m;
        q4m.count = bf16m.count = count;
        q4m.nranks = bf16m.nranks = p;
        q4m.dense_codec = sk::CodecId::kQ4;
        bf16m.dense_codec = sk::CodecId::kBf16;
        sc::SupportHistory h{true, c.union_nz, c.union_rows};
        const double q4 = sc::estimate_wire(q4m, h).dense, bf16 = sc::estimate_wire(bf16m, h).dense;
        const char* choice = c.choice.codec == sk::CodecId::kSparse
                                 ? sc::support_encoding_name(c.choice.support)
                                 : sk::codec_name(c.choice.codec);
        std::printf(
            "| %d | %s | %.4f%% | %.1f%% | %.4f / %.4f / %.4f | %.4f | %.4f | %.4f | %.4f | "
            "%.4f | %.2f / %.2f / %.2f | %s%s |\n",
            p, rows ? "rows of 64" : "i.i.d.",
            100.0 * static_cast<double>(c.union_nz) / static_cast<double>(count),
            100.0 * static_cast<double>(c.union_rows) / static_cast<double>(count / 64),
            c.wire.element_bitmap / in_bytes, c.wire.row_bitmap / in_bytes,
            c.wire.index_list / in_bytes, c.wire.s2 / in_bytes, s2_fp32(c, count, p) / in_bytes,
            c.wire.dense / in_bytes, q4 / in_bytes, bf16 / in_bytes, c.cpu_sparse, c.cpu_s2,
            c.cpu_q8, c.choice.codec == sk::CodecId::kSparse ? "sparse, " : "", choice);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
