// sketchccl-perf's inputs: generated from (seed, rank, index) only, so every rank can compute
// every rank's input and the exact sum, or read from a .npy gradient dump; and the element types.
#pragma once

#include <nccl.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace perfinputs {

// Bad --data: a message and exit status 2, as for every bad flag.
// "sketchccl-perf: <message>" on stderr, exit status 2: bad flags or inputs.
[[noreturn]] inline void input_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void input_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "sketchccl-perf: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(2);
}

// Inputs: element i of rank r is a function of (seed, r, i) only, so any rank can compute every
// rank's input and the exact sum, and a smaller size is a prefix of a larger one.

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint16_t f32_to_f16(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (x < 0x38800000u) {                                               // subnormal half
    float a;
    std::memcpy(&a, &x, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t r = x + 0xfffu + ((x >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = static_cast<float>(m) / 16777216.0f;
    return sign ? -v : v;
  }
  uint32_t x = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
inline float bf16_to_f32(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Rounds a value to what the buffer type can hold.
inline float round_to(ncclDataType_t t, float v) {
  if (t == ncclFloat16) return f16_to_f32(f32_to_f16(v));
  if (t == ncclBfloat16) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

struct DataSpec {
  enum Kind { kGauss, kLaplace, kStudent3, kOutliers, kSparse, kClustered, kFile } kind = kGauss;
  double density = 1;  // sparse: of elements; clustered: of rows, per rank
  std::string file;
  std::string describe;
};

inline DataSpec parse_data(const std::string& d) {
  DataSpec s;
  s.describe = d;
  if (d == "gauss") {
    s.kind = DataSpec::kGauss;
  } else if (d == "laplace") {
    s.kind = DataSpec::kLaplace;
  } else if (d == "student3") {
    s.kind = DataSpec::kStudent3;
  } else if (d == "outliers") {
    s.kind = DataSpec::kOutliers;
  } else if (d.rfind("sparse:", 0) == 0 || d == "sparse") {
    s.kind = DataSpec::kSparse;
    s.density = 0.01;
    if (d.size() > 7) {
      char* end = nullptr;
      s.density = std::strtod(d.c_str() + 7, &end);
      if (*end == '%') s.density /= 100, ++end;
      if (*end != '\0' || !(s.density > 0 && s.density <= 1))
        input_error(
            "bad --data '%s': sparse:DENSITY takes a fraction in (0, 1] (e.g. sparse:0.01 or "
            "sparse:1%%)",
            d.c_str());
    }
  } else if (d.rfind("clustered:", 0) == 0 || d == "clustered") {
    s.kind = DataSpec::kClustered;
    s.density = 0.01;
    if (d.size() > 10) {
      char* end = nullptr;
      s.density = std::strtod(d.c_str() + 10, &end);
      if (*end == '%') s.density /= 100, ++end;
      if (*end != '\0' || !(s.density > 0 && s.density <= 1))
        input_error(
            "bad --data '%s': clustered:ROWS takes the fraction of rows per rank in (0, 1] (e.g. "
            "clustered:0.01 or clustered:1%%)",
            d.c_str());
    }
  } else if (d.size() > 4 && d.substr(d.size() - 4) == ".npy") {
    s.kind = DataSpec::kFile;
    s.file = d;
  } else {
    input_error(
        "bad --data '%s': gauss | laplace | student3 | outliers | sparse:DENSITY | clustered:ROWS "
        "| "
        "FILE.npy",
        d.c_str());
  }
  return s;
}

// A .npy file (little-endian f2/f4/f8, C order), flattened to float.
inline std::vector<float> load_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) input_error("cannot open --data file %s", path.c_str());
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    input_error("%s is not a .npy file", path.c_str());
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16 = 0;
    f.read(reinterpret_cast<char*>(&h16), 2);
    hlen = h16;
  } else {
    f.read(reinterpret_cast<char*>(&hlen), 4);
  }
  std::string header(hlen, '\0');
  f.read(header.data(), hlen);
  if (!f) input_error("%s: truncated .npy header", path.c_str());
  if (header.find("'fortran_order': True") != std::string::npos)
    input_error("%s: Fortran-ordered arrays are not supported", path.c_str());
  int width = header.find("'<f4'") != std::string::npos   ? 4
              : header.find("'<f8'") != std::string::npos ? 8
              : header.find("'<f2'") != std::string::npos ? 2
                                                          : 0;
  if (width == 0)
    input_error("%s: only little-endian float16/32/64 arrays are supported", path.c_str());
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t n = raw.size() / static_cast<size_t>(width);
  if (n == 0) input_error("%s holds no elements", path.c_str());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (width == 4) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else if (width == 8) {
      double d;
      std::memcpy(&d, raw.data() + 8 * i, 8);
      out[i] = static_cast<float>(d);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = f16_to_f32(h);
    }
  }
  return out;
}

class Inputs {
 public:
  Inputs(const DataSpec& spec, uint64_t seed, ncclDataType_t type, int nranks)
      : spec_(spec), seed_(seed), type_(type), nranks_(nranks) {}

  // Rank r's first `count` inputs (as float, already rounded to the buffer type).
  void generate(int r, size_t count, std::vector<float>* out) {
    out->resize(count);
    if (spec_.kind == DataSpec::kFile) {
      const std::vector<float>& src = file_for(r);
      // One file for all ranks: rank r reads it from a rank-dependent offset (cyclically).
      size_t off = per_rank_files_
                       ? 0
                       : (src.size() / static_cast<size_t>(nranks_)) * static_cast<size_t>(r);
      for (size_t i = 0; i < count; ++i)
        (*out)[i] = round_to(type_, src[(off + i) % src.size()]);
      return;
    }
    const uint64_t base = mix(seed_ * 0x100000001b3ull + static_cast<uint64_t>(r) + 1);
    for (size_t i = 0; i < count; ++i) {
      uint64_t h = mix(base ^ (i * 0xd6e8feb86659fd93ull));
      float v;
      // Values are put on a grid of 2^-12 so that the fp32 sum of up to thousands of ranks is
      // exact in any order: the exact `none` ring then shows an error of exactly 0.
      if (spec_.kind == DataSpec::kSparse || spec_.kind == DataSpec::kClustered) {
        const bool zero = spec_.kind == DataSpec::kSparse
                              ? (h >> 11) * (1.0 / 9007199254740992.0) >= spec_.density
                              : !clustered_row(r, i / kClusteredRow);
        if (zero) {
          (*out)[i] = 0.0f;
          continue;
        }
        v = gauss(mix(h));
        if (std::fabs(v) < 1.0f / 4096) v = v < 0 ? -1.0f / 4096 : 1.0f / 4096;
      } else if (spec_.kind == DataSpec::kLaplace || spec_.kind == DataSpec::kOutliers) {
        double u = ((h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        v = static_cast<float>(u < 0.5 ? std::log(2 * u) : -std::log(2 - 2 * u));
        // outliers: 1% of the elements 50 times larger (a few per 256-block of every rank)
        if (spec_.kind == DataSpec::kOutliers && (mix(h ^ 0x0de1a5ull) % 100) == 0) v *= 50.0f;
      } else if (spec_.kind == DataSpec::kStudent3) {
        // Student's t with 3 degrees of freedom: a normal over sqrt(chi2(3) / 3), capped at
        // 1000 (heavy tails: a few elements per block set its range).
        const uint64_t h1 = mix(h), h2 = mix(h1), h3 = mix(h2);
        const float g1 = gauss(h1), g2 = gauss(h2), g3 = gauss(h3);
        const float chi = (g1 * g1 + g2 * g2 + g3 * g3) / 3.0f;
        v = chi > 0 ? gauss(h) / std::sqrt(chi) : 0.0f;
        v = std::fmax(-1000.0f, std::fmin(1000.0f, v));
      } else {
        v = gauss(h);
      }
      (*out)[i] = round_to(type_, std::nearbyint(v * 4096.0f) / 4096.0f);
    }
  }

 private:
  // clustered: embedding-style gradients, rows of kClusteredRow contiguous non-zeros. A shared
  // pool of `density` of the rows (the same on every rank, like frequent tokens); each rank takes
  // half of the pool's rows and as many rows of its own: `density` of the rows per rank, each
  // pool row on about half of the ranks (4 ranks at 1%: a union of about 2.9% of the rows). Row
  // counts then vary between slices by their binomial spread (one standard deviation: ~9% of
  // the union rows of 2^18 elements), as the rows of a real embedding gradient do.
  static constexpr size_t kClusteredRow = 64;
  bool clustered_row(int r, size_t row) const {
    const double unit = 1.0 / 18446744073709551616.0;  // 2^-64
    const uint64_t rs = static_cast<uint64_t>(r) + 1;
    const double pool = static_cast<double>(mix(seed_ ^ 0xc1057e4edull ^ (row * 0x9e37ull))) * unit;
    if (pool < spec_.density)
      return static_cast<double>(mix(seed_ + rs * 0x51ed27ull + row * 0xa24baed4963ee407ull)) *
                 unit <
             0.5;
    return static_cast<double>(
               mix(seed_ * 0x2545f4914f6cdd1dull + rs * 0x9fb21c651e98df25ull + row)) *
               unit <
           spec_.density / 2;
  }
  static float gauss(uint64_t h) {
    float u1 = static_cast<float>(((h >> 40) + 0.5) * (1.0 / 16777216.0));
    float u2 = static_cast<float>((h & 0xffffffu) * (1.0 / 16777216.0));
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }
  const std::vector<float>& file_for(int r) {
    std::string path = spec_.file;
    size_t p = path.find("%r");
    if (p != std::string::npos) {
      per_rank_files_ = true;
      path.replace(p, 2, std::to_string(r));
    }
    if (cached_path_ != path) {
      cached_ = load_npy(path);
      cached_path_ = path;
    }
    return cached_;
  }
  DataSpec spec_;
  uint64_t seed_;
  ncclDataType_t type_;
  int nranks_;
  bool per_rank_files_ = false;
  std::string cached_path_;
  std::vector<float> cached_;
};

inline void to_buffer(ncclDataType_t t, const float* src, size_t n, std::vector<char>* out) {
  size_t ts = t == ncclFloat32 ? 4 : 2;
  out->resize(n * ts);
  if (t == ncclFloat32) {
    std::memcpy(out->data(), src, n * 4);
    return;
  }
  auto* h = reinterpret_cast<uint16_t*>(out->data());
  for (size_t i = 0; i < n; ++i)
    h[i] = t == ncclFloat16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
}
inline double from_buffer(ncclDataType_t t, const char* buf, size_t i) {
  if (t == ncclFloat32) {
    float f;
    std::memcpy(&f, buf + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, buf + 2 * i, 2);
  return t == ncclFloat16 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace perfinputs
