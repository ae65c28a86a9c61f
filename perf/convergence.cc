// Convergence benchmark: data-parallel training over 4 ranks (processes) whose gradient
// AllReduce goes through ncclAllReduce (libsketchccl.so, standalone, host backend), once per
// codec (and with error feedback on and off where it applies), against exact.
//
// Tasks:
//   digits  an MLP (64-64-10, ReLU, softmax) on the handwritten digits of Debian's
//           python3-sklearn (sklearn/datasets/data/digits.csv.gz, decompressed: --digits FILE);
//           dense gradients.
//   digits-wide  the same data through an MLP 64-1024-1024-10 (1,126,410 parameters, a 4.3 MiB
//           gradient): realistic buffer sizes for the codecs' tables and budgets.
//   text    an embedding-bag classifier (mean of token embeddings -> linear -> softmax) on a
//           synthetic corpus with a Zipfian vocabulary generated here; row-sparse gradients.
//
//   convergence [--task digits|digits-wide|text|all] [--digits FILE] [--epochs N] [--configs LIST]
//               [--nranks N] [--seed S] [--short] [--csv FILE] [--sharded]
// --sharded: sharded data parallelism (ZeRO / FSDP style): the gradient goes through
// ncclReduceScatter (compressed), each rank updates its shard of the parameters (and keeps that
// shard's momentum), and the parameters are all-gathered exactly. Standalone mode has no
// ncclAllGather: the all-gather is an ncclAllReduce (sum) of the zero-padded shard vectors, in
// calls of kExactCallElems elements, below the SKETCHCCL_MIN_BYTES this mode sets, which
// standalone mode runs exact (`none`): a sum where one rank alone holds non-zero values is exact.
// Deterministic: data, split, initialisation and batches come from --seed; the library's
// randomness is counter-based. Every rank holds the same parameters (the AllReduce result is
// identical on every rank, bit for bit), so rank 0 evaluates.
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "perf_common.h"
#include "sketchccl/sketchccl.h"

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "convergence: %s\n", msg.c_str());
  std::exit(2);
}

#define NCCLCHECK(call)                                                      \
  do {                                                                       \
    ncclResult_t r_ = (call);                                                \
    if (r_ != ncclSuccess)                                                   \
      die(std::string(#call) + " failed: " + ncclGetErrorString(r_) + " (" + \
          ncclGetLastError(nullptr) + ")");                                  \
  } while (0)

// splitmix64-based deterministic RNG.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

template <typename T>
void shuffle(std::vector<T>* v, Rng* rng) {
  for (size_t i = v->size(); i > 1; --i)
    std::swap((*v)[i - 1], (*v)[rng->below(i)]);
}

// softmax cross-entropy on logits z[C]; writes dz = p - onehot; returns loss.
float softmax_xent(const float* z, int C, int label, float* dz, int* argmax) {
  float m = z[0];
  int am = 0;
  for (int c = 1; c < C; ++c) {
    if (z[c] > m) m = z[c], am = c;
  }
  double sum = 0;
  for (int c = 0; c < C; ++c)
    sum += std::exp(static_cast<double>(z[c] - m));
  if (argmax) *argmax = am;
  if (dz) {
    for (int c = 0; c < C; ++c)
      dz[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - m)) / sum) -
              (c == label ? 1.f : 0.f);
  }
  return static_cast<float>(std::log(sum) - (z[label] - m));
}

// ---------------------------------------------------------------------------------------------
// A task: parameters (one flat vector), a gradient on a batch, and evaluation.

struct Eval {
  double loss = 0, acc = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual size_t nparams() const = 0;
  virtual void init(std::vector<float>* w, uint64_t seed) const = 0;
  virtual size_t ntrain() const = 0;
  // grad = mean gradient of the loss over the samples idx (grad is zeroed first).
  virtual void gradient(const std::vector<float>& w, const std::vector<size_t>& idx,
                        std::vector<float>* grad) const = 0;
  virtual Eval evaluate(const std::vector<float>& w, bool test) const = 0;
  virtual float lr() const = 0;
  virtual int batch() const = 0;
  virtual const char* name() const = 0;
};

// The sklearn digits CSV: 8x8 images, features 0..16 scaled to [0, 1], split 80/20 by seed.
struct DigitsData {
  static constexpr int D = 64;
  std::vector<float> xtr, xte;
  std::vector<int> ytr, yte;
  DigitsData(const std::string& csv, uint64_t seed) {
    std::ifstream f(csv);
    if (!f) die("cannot read the digits data " + csv);
    std::string line;
    std::vector<std::vector<float>> X;
    std::vector<int> Y;
    while (std::getline(f, line)) {
      std::vector<float> row;
      std::stringstream ss(line);
      std::string cell;
      while (std::getline(ss, cell, ','))
        row.push_back(std::strtof(cell.c_str(), nullptr));
      if (row.size() != D + 1) continue;
      Y.push_back(static_cast<int>(row[D]));
      row.pop_back();
      for (float& v : row)
        v /= 16.0f;
      X.push_back(row);
    }
    if (X.size() < 1000) die(csv + ": expected 1797 rows of 65 numbers (the sklearn digits CSV)");
    std::vector<size_t> order(X.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    Rng rng(seed ^ 0xd161d161ull);
    shuffle(&order, &rng);
    size_t ntest = X.size() / 5;  // 80/20 split
    for (size_t k = 0; k < order.size(); ++k) {
      auto& xs = k < ntest ? xte : xtr;
      auto& ys = k < ntest ? yte : ytr;
      xs.insert(xs.end(), X[order[k]].begin(), X[order[k]].end());
      ys.push_back(Y[order[k]]);
    }
  }
};

// digits: MLP 64-H-10.
class Digits : public Task {
 public:
  static constexpr int D = 64, H = 64, C = 10;
  Digits(const std::string& csv, uint64_t seed) : data_(csv, seed) {}
  size_t nparams() const override { return H * D + H + C * H + C; }
  size_t ntrain() const override { return data_.ytr.size(); }
  float lr() const override { return 0.1f; }
  int batch() const override { return 16; }
  const char* name() const override { return "digits"; }
  void init(std::vector<float>* w, uint64_t seed) const override {
    w->assign(nparams(), 0.0f);
    Rng rng(seed ^ 0x1417ull);
    float s1 = std::sqrt(2.0f / D), s2 = std::sqrt(2.0f / H);
    for (int i = 0; i < H * D; ++i)
      (*w)[static_cast<size_t>(i)] = rng.normal() * s1;
    for (int i = 0; i < C * H; ++i)
      (*w)[static_cast<size_t>(H * D + H + i)] = rng.normal() * s2;
  }
  void gradient(const std::vector<float>& w, const std::vector<size_t>& idx,
                std::vector<float>* g) const override {
    g->assign(nparams(), 0.0f);
    const float *W1 = w.data(), *b1 = W1 + H * D, *W2 = b1 + H, *b2 = W2 + C * H;
    float *G1 = g->data(), *gb1 = G1 + H * D, *G2 = gb1 + H, *gb2 = G2 + C * H;
    const float inv = 1.0f / static_cast<float>(idx.size());
    for (size_t s : idx) {
      const float* x = &data_.xtr[s * D];
      float h[H], z[C], dz[C], dh[H];
      forward(w, x, h, z);
      softmax_xent(z, C, data_.ytr[s], dz, nullptr);
      for (int c = 0; c < C; ++c) {
        gb2[c] += dz[c] * inv;
        for (int j = 0; j < H; ++j)
          G2[c * H + j] += dz[c] * h[j] * inv;
      }
      for (int j = 0; j < H; ++j) {
        float a = 0;
        for (int c = 0; c < C; ++c)
          a += W2[c * H + j] * dz[c];
        dh[j] = h[j] > 0 ? a : 0;
      }
      for (int j = 0; j < H; ++j) {
        gb1[j] += dh[j] * inv;
        for (int i = 0; i < D; ++i)
          G1[j * D + i] += dh[j] * x[i] * inv;
      }
    }
    (void)b2;
  }
  Eval evaluate(const std::vector<float>& w, bool test) const override {
    const auto& X = test ? data_.xte : data_.xtr;
    const auto& Y = test ? data_.yte : data_.ytr;
    Eval e;
    for (size_t s = 0; s < Y.size(); ++s) {
      float h[H], z[C];
      forward(w, &X[s * D], h, z);
      int am = 0;
      e.loss += softmax_xent(z, C, Y[s], nullptr, &am);
      e.acc += am == Y[s];
    }
    e.loss /= static_cast<double>(Y.size());
    e.acc /= static_cast<double>(Y.size());
    return e;
  }

 private:
  void forward(const std::vector<float>& w, const float* x, float* h, float* z) const {
    const float *W1 = w.data(), *b1 = W1 + H * D, *W2 = b1 + H, *b2 = W2 + C * H;
    for (int j = 0; j < H; ++j) {
      float a = b1[j];
      for (int i = 0; i < D; ++i)
        a += W1[j * D + i] * x[i];
      h[j] = a > 0 ? a : 0;
    }
    for (int c = 0; c < C; ++c) {
      float a = b2[c];
      for (int j = 0; j < H; ++j)
        a += W2[c * H + j] * h[j];
      z[c] = a;
    }
  }
  DigitsData data_;
};

// digits-wide: the same data through an MLP 64-1024-1024-10 (ReLU), 1,126,410 parameters (a
// 4.3 MiB gradient, one ncclAllReduce per step as a DDP bucket of up to 25 MiB would be): the
// size where CASQ's tables and s2's budget meet realistic buffers. Weights are stored input-major
// so that the forward pass and the weight gradients are vectorisable row updates (axpy) that
// skip the inputs ReLU zeroed.
class DigitsWide : public Task {
 public:
  static constexpr size_t D = 64, H1 = 1024, H2 = 1024, C = 10;
  static constexpr size_t kW1 = 0, kB1 = kW1 + D * H1, kW2 = kB1 + H1, kB2 = kW2 + H1 * H2,
                          kW3 = kB2 + H2, kB3 = kW3 + H2 * C, kParams = kB3 + C;
  DigitsWide(const std::string& csv, uint64_t seed) : data_(csv, seed) {}
  size_t nparams() const override { return kParams; }
  size_t ntrain() const override { return data_.ytr.size(); }
  float lr() const override { return 0.05f; }
  int batch() const override { return 16; }
  const char* name() const override { return "digits-wide"; }
  void init(std::vector<float>* w, uint64_t seed) const override {
    w->assign(nparams(), 0.0f);
    Rng rng(seed ^ 0x3a1dull);
    auto he = [&](size_t at, size_t fan_in, size_t n) {
      const float sd = std::sqrt(2.0f / static_cast<float>(fan_in));
      for (size_t i = 0; i < n; ++i)
        (*w)[at + i] = rng.normal() * sd;
    };
    he(kW1, D, D * H1);
    he(kW2, H1, H1 * H2);
    he(kW3, H2, H2 * C);
  }
  void gradient(const std::vector<float>& w, const std::vector<size_t>& idx,
                std::vector<float>* g) const override {
    g->assign(nparams(), 0.0f);
    const float* W2 = w.data() + kW2;
    const float* W3 = w.data() + kW3;
    float* G = g->data();
    const float inv = 1.0f / static_cast<float>(idx.size());
    std::vector<float> h1(H1), h2(H2), dh1(H1), dh2(H2);
    for (size_t s : idx) {
      const float* x = &data_.xtr[s * D];
      float z[C], dz[C];
      forward(w, x, h1.data(), h2.data(), z);
      softmax_xent(z, static_cast<int>(C), data_.ytr[s], dz, nullptr);
      for (size_t c = 0; c < C; ++c)
        dz[c] *= inv;
      for (size_t c = 0; c < C; ++c)
        G[kB3 + c] += dz[c];
      for (size_t j = 0; j < H2; ++j) {
        if (h2[j] <= 0) {
          dh2[j] = 0;
          continue;
        }
        float a = 0;
        for (size_t c = 0; c < C; ++c) {
          G[kW3 + j * C + c] += h2[j] * dz[c];
          a += W3[j * C + c] * dz[c];
        }
        dh2[j] = a;
      }
      for (size_t j = 0; j < H2; ++j)
        G[kB2 + j] += dh2[j];
      for (size_t i = 0; i < H1; ++i) {
        if (h1[i] <= 0) {
          dh1[i] = 0;
          continue;
        }
        axpy(h1[i], dh2.data(), G + kW2 + i * H2, H2);
        dh1[i] = dot(W2 + i * H2, dh2.data(), H2);
      }
      for (size_t i = 0; i < H1; ++i)
        G[kB1 + i] += dh1[i];
      for (size_t i = 0; i < D; ++i) {
        if (x[i] != 0) axpy(x[i], dh1.data(), G + kW1 + i * H1, H1);
      }
    }
  }
  Eval evaluate(const std::vector<float>& w, bool test) const override {
    const auto& X = test ? data_.xte : data_.xtr;
    const auto& Y = test ? data_.yte : data_.ytr;
    std::vector<float> h1(H1), h2(H2);
    Eval e;
    for (size_t s = 0; s < Y.size(); ++s) {
      float z[C];
      forward(w, &X[s * D], h1.data(), h2.data(), z);
      int am = 0;
      e.loss += softmax_xent(z, static_cast<int>(C), Y[s], nullptr, &am);
      e.acc += am == Y[s];
    }
    e.loss /= static_cast<double>(Y.size());
    e.acc /= static_cast<double>(Y.size());
    return e;
  }

 private:
  static void axpy(float a, const float* x, float* y, size_t n) {
    for (size_t k = 0; k < n; ++k)
      y[k] += a * x[k];
  }
  // Eight partial sums, so that the compiler vectorises the reduction without -ffast-math.
  static float dot(const float* a, const float* b, size_t n) {
    float acc[8] = {};
    for (size_t k = 0; k < n; k += 8) {
      for (size_t l = 0; l < 8; ++l)
        acc[l] += a[k + l] * b[k + l];
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
  void forward(const std::vector<float>& w, const float* x, float* h1, float* h2, float* z) const {
    std::copy(w.data() + kB1, w.data() + kB1 + H1, h1);
    for (size_t i = 0; i < D; ++i) {
      if (x[i] != 0) axpy(x[i], w.data() + kW1 + i * H1, h1, H1);
    }
    for (size_t i = 0; i < H1; ++i)
      h1[i] = h1[i] > 0 ? h1[i] : 0;
    std::copy(w.data() + kB2, w.data() + kB2 + H2, h2);
    for (size_t i = 0; i < H1; ++i) {
      if (h1[i] > 0) axpy(h1[i], w.data() + kW2 + i * H2, h2, H2);
    }
    for (size_t j = 0; j < H2; ++j)
      h2[j] = h2[j] > 0 ? h2[j] : 0;
    std::copy(w.data() + kB3, w.data() + kB3 + C, z);
    for (size_t j = 0; j < H2; ++j) {
      if (h2[j] > 0) axpy(h2[j], w.data() + kW3 + j * C, z, C);
    }
  }
  DigitsData data_;
};

// text: a synthetic corpus. Vocabulary V words with Zipfian frequencies (s = 1.1). Each of C
// classes owns a random set of K topic words. A document of 16..48 tokens draws each token from
// its class's topic words (probability 0.08, Zipfian within them) or from the whole vocabulary
// (0.92). Model: mean of the token embeddings (dimension E) -> linear -> softmax. The embedding
// gradient is non-zero only in the rows of the batch's tokens.
class Text : public Task {
 public:
  static constexpr int V = 32768, E = 16, C = 8, K = 400;
  explicit Text(uint64_t seed) {
    Rng rng(seed ^ 0x7e47ull);
    std::vector<double> cdf(V);
    double acc = 0;
    for (int v = 0; v < V; ++v)
      cdf[static_cast<size_t>(v)] = (acc += 1.0 / std::pow(v + 1.0, 1.1));
    for (double& c : cdf)
      c /= acc;
    std::vector<double> tcdf(K);
    acc = 0;
    for (int k = 0; k < K; ++k)
      tcdf[static_cast<size_t>(k)] = (acc += 1.0 / std::pow(k + 1.0, 1.1));
    for (double& c : tcdf)
      c /= acc;
    // word ids by frequency rank are a random permutation, so frequent words are spread out
    std::vector<int> perm(V);
    for (int v = 0; v < V; ++v)
      perm[static_cast<size_t>(v)] = v;
    shuffle(&perm, &rng);
    std::vector<std::vector<int>> topic(C);
    for (int c = 0; c < C; ++c) {
      for (int k = 0; k < K; ++k)
        topic[static_cast<size_t>(c)].push_back(static_cast<int>(rng.below(V)));
    }
    auto make = [&](size_t n, std::vector<int>* off, std::vector<int>* tok, std::vector<int>* y) {
      off->push_back(0);
      for (size_t d = 0; d < n; ++d) {
        int c = static_cast<int>(rng.below(C));
        int len = 16 + static_cast<int>(rng.below(33));
        for (int t = 0; t < len; ++t) {
          if (rng.uniform() < 0.08) {
            size_t k = static_cast<size_t>(
                std::lower_bound(tcdf.begin(), tcdf.end(), rng.uniform()) - tcdf.begin());
            tok->push_back(topic[static_cast<size_t>(c)][std::min<size_t>(k, K - 1)]);
          } else {
            size_t v = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), rng.uniform()) -
                                           cdf.begin());
            tok->push_back(perm[std::min<size_t>(v, V - 1)]);
          }
        }
        off->push_back(static_cast<int>(tok->size()));
        y->push_back(c);
      }
    };
    make(16000, &otr_, &ttr_, &ytr_);
    make(4000, &ote_, &tte_, &yte_);
  }
  size_t nparams() const override { return static_cast<size_t>(V) * E + C * E + C; }
  size_t ntrain() const override { return ytr_.size(); }
  float lr() const override { return 0.5f; }
  int batch() const override { return 32; }
  const char* name() const override { return "text"; }
  void init(std::vector<float>* w, uint64_t seed) const override {
    w->assign(nparams(), 0.0f);
    Rng rng(seed ^ 0xe3bull);
    for (size_t i = 0; i < static_cast<size_t>(V) * E; ++i)
      (*w)[i] = rng.normal() * 0.1f;
    for (int i = 0; i < C * E; ++i)
      (*w)[static_cast<size_t>(V) * E + static_cast<size_t>(i)] = rng.normal() * 0.25f;
  }
  void gradient(const std::vector<float>& w, const std::vector<size_t>& idx,
                std::vector<float>* g) const override {
    g->assign(nparams(), 0.0f);
    const float* Wc = w.data() + static_cast<size_t>(V) * E;
    float* Ge = g->data();
    float *Gc = Ge + static_cast<size_t>(V) * E, *gb = Gc + C * E;
    const float inv = 1.0f / static_cast<float>(idx.size());
    for (size_t s : idx) {
      float m[E], z[C], dz[C];
      const int b = otr_[s], e = otr_[s + 1];
      forward(w, &ttr_[static_cast<size_t>(b)], e - b, m, z);
      softmax_xent(z, C, ytr_[s], dz, nullptr);
      float dm[E] = {};
      for (int c = 0; c < C; ++c) {
        gb[c] += dz[c] * inv;
        for (int j = 0; j < E; ++j) {
          Gc[c * E + j] += dz[c] * m[j] * inv;
          dm[j] += Wc[c * E + j] * dz[c];
        }
      }
      const float per = inv / static_cast<float>(e - b);
      for (int t = b; t < e; ++t) {
        float* row = Ge + static_cast<size_t>(ttr_[static_cast<size_t>(t)]) * E;
        for (int j = 0; j < E; ++j)
          row[j] += dm[j] * per;
      }
    }
  }
  Eval evaluate(const std::vector<float>& w, bool test) const override {
    const auto& off = test ? ote_ : otr_;
    const auto& tok = test ? tte_ : ttr_;
    const auto& Y = test ? yte_ : ytr_;
    Eval ev;
    for (size_t s = 0; s < Y.size(); ++s) {
      float m[E], z[C];
      forward(w, &tok[static_cast<size_t>(off[s])], off[s + 1] - off[s], m, z);
      int am = 0;
      ev.loss += softmax_xent(z, C, Y[s], nullptr, &am);
      ev.acc += am == Y[s];
    }
    ev.loss /= static_cast<double>(Y.size());
    ev.acc /= static_cast<double>(Y.size());
    return ev;
  }

 private:
  void forward(const std::vector<float>& w, const int* tok, int n, float* m, float* z) const {
    const float* Wc = w.data() + static_cast<size_t>(V) * E;
    const float* b = Wc + C * E;
    for (int j = 0; j < E; ++j)
      m[j] = 0;
    for (int t = 0; t < n; ++t) {
      const float* row = w.data() + static_cast<size_t>(tok[t]) * E;
      for (int j = 0; j < E; ++j)
        m[j] += row[j];
    }
    for (int j = 0; j < E; ++j)
      m[j] /= static_cast<float>(n);
    for (int c = 0; c < C; ++c) {
      float a = b[c];
      for (int j = 0; j < E; ++j)
        a += Wc[c * E + j] * m[j];
      z[c] = a;
    }
  }
  std::vector<int> otr_, ttr_, ytr_, ote_, tte_, yte_;
};

// ---------------------------------------------------------------------------------------------

struct Options {
  std::string task = "digits", digits, configs, csv, result;
  long epochs = 0, nranks = 4, seed = 1, rank = -1;
  bool shrt = false;
  bool sharded = false;
  std::string id_file;
};

size_t count_nonzero(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v)
    n += x != 0.0f;
  return n;
}

// SKETCHCCL_STATS_FILE with %p expanded (set by the launcher below).
std::string perfutil_stats_path() {
  const char* e = std::getenv("SKETCHCCL_STATS_FILE");
  std::string p = e ? e : "";
  for (size_t i; (i = p.find("%p")) != std::string::npos;)
    p.replace(i, 2, std::to_string(getpid()));
  return p;
}

// Calls per codec so far on `comm` (the accuracy guard may move a buffer between codecs), and
// the sum of the library's NMSE estimates with their count.
struct CodecCalls {
  std::vector<std::pair<std::string, uint64_t>> calls;
  double est_sum = 0;
  uint64_t est_calls = 0;
};
CodecCalls codec_calls(ncclComm_t comm) {
  CodecCalls out;
  sketchcclCommStats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  if (sketchcclCommGetStats(comm, &s) != 0) return out;
  for (int i = 0; i < s.num_codecs; ++i) {
    out.calls.emplace_back(s.codecs[i].name, s.codecs[i].calls);
    out.est_sum +=
        s.accuracy[i].estimated_nmse_mean * static_cast<double>(s.accuracy[i].estimated_calls);
    out.est_calls += s.accuracy[i].estimated_calls;
  }
  return out;
}

// "q2 40, q4 3 (est. NMSE 1.2e-02)": the calls of each codec between two snapshots.
std::string codec_moves(const CodecCalls& before, const CodecCalls& after) {
  std::string out;
  for (const auto& [name, n] : after.calls) {
    uint64_t was = 0;
    for (const auto& [bn, bc] : before.calls) {
      if (bn == name) was = bc;
    }
    if (n == was) continue;
    out += (out.empty() ? "" : ",") + name + ":" + std::to_string(n - was);
  }
  if (after.est_calls > before.est_calls) {
    char b[48];
    std::snprintf(
        b, sizeof b, " est_nmse:%.2e",
        (after.est_sum - before.est_sum) / static_cast<double>(after.est_calls - before.est_calls));
    out += b;
  }
  return out.empty() ? "-" : out;
}

// --sharded: SKETCHCCL_MIN_BYTES, and the calls of the exact all-gather, below it.
constexpr size_t kShardedMinBytes = 4096;
constexpr size_t kExactCallElems = kShardedMinBytes / sizeof(float) - 1;

// The sharded step's collectives: the gradient ReduceScattered (ncclAvg) into this rank's shard,
// and the parameters all-gathered exactly (see the file comment). Buffers keep their addresses
// from step to step (error feedback is keyed by buffer).
class Sharded {
 public:
  Sharded(size_t nparams, int rank, int nranks)
      : rank_(static_cast<size_t>(rank)),
        shard_((nparams + static_cast<size_t>(nranks) - 1) / static_cast<size_t>(nranks)),
        padded_(shard_ * static_cast<size_t>(nranks)),
        grad_(padded_, 0.0f),
        mine_(shard_, 0.0f),
        gather_(padded_, 0.0f) {}
  size_t first() const { return rank_ * shard_; }
  size_t shard() const { return shard_; }
  // This rank's shard of the averaged gradient, from its full gradient g.
  const std::vector<float>& reduce_scatter(const std::vector<float>& g, ncclComm_t comm) {
    std::copy(g.begin(), g.end(), grad_.begin());
    NCCLCHECK(
        ncclReduceScatter(grad_.data(), mine_.data(), shard_, ncclFloat32, ncclAvg, comm, nullptr));
    return mine_;
  }
  // w, whose shard this rank updated, gets every rank's shard, bit for bit.
  void all_gather(std::vector<float>* w, ncclComm_t comm) {
    std::fill(gather_.begin(), gather_.end(), 0.0f);
    const size_t n = std::min(shard_, w->size() - std::min(w->size(), first()));
    std::copy(w->begin() + static_cast<long>(first()), w->begin() + static_cast<long>(first() + n),
              gather_.begin() + first());
    for (size_t at = 0; at < padded_; at += kExactCallElems) {
      const size_t k = std::min(kExactCallElems, padded_ - at);
      NCCLCHECK(ncclAllReduce(gather_.data() + at, gather_.data() + at, k, ncclFloat32, ncclSum,
                              comm, nullptr));
    }
    std::copy(gather_.begin(), gather_.begin() + static_cast<long>(w->size()), w->begin());
  }

 private:
  size_t rank_, shard_, padded_;
  std::vector<float> grad_, mine_, gather_;
};

// One rank's training: plain SGD with momentum 0.9; the gradient is averaged with ncclAvg.
int train_rank(const Options& o) {
  std::unique_ptr<Task> task;
  if (o.task == "digits")
    task = std::make_unique<Digits>(o.digits, static_cast<uint64_t>(o.seed));
  else if (o.task == "digits-wide")
    task = std::make_unique<DigitsWide>(o.digits, static_cast<uint64_t>(o.seed));
  else
    task = std::make_unique<Text>(static_cast<uint64_t>(o.seed));
  const int rank = static_cast<int>(o.rank), P = static_cast<int>(o.nranks);
  ncclUniqueId id;
  std::string err, hex;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    if (!perfutil::write_id_file(o.id_file, perfutil::to_hex(&id, sizeof id), &err)) die(err);
  } else {
    if (!perfutil::read_id_file(o.id_file, sizeof id, 60, &hex, &err)) die(err);
    perfutil::from_hex(hex, &id, sizeof id);
  }
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, P, id, rank));

  std::vector<float> w, g, mom(task->nparams(), 0.0f);
  task->init(&w, static_cast<uint64_t>(o.seed));
  // this rank's shard of the training set: samples r, r+P, r+2P, ...
  std::vector<size_t> shard;
  for (size_t s = static_cast<size_t>(rank); s < task->ntrain(); s += static_cast<size_t>(P))
    shard.push_back(s);
  Rng rng(static_cast<uint64_t>(o.seed) * 1000 + static_cast<uint64_t>(rank));
  std::ofstream res;
  if (rank == 0) {
    res.open(o.result);
    Eval tr = task->evaluate(w, false), te = task->evaluate(w, true);
    res << 0 << " " << tr.loss << " " << tr.acc << " " << te.loss << " " << te.acc << "\n";
  }
  const size_t B = static_cast<size_t>(task->batch());
  const size_t steps = shard.size() / B;  // the same on every rank (shards differ by <= 1)
  const size_t min_steps = task->ntrain() / static_cast<size_t>(P) / B;
  double nz_local = 0, nz_reduced = 0, nsteps = 0;
  std::ofstream moves;  // the codecs each epoch ran (result + ".codecs")
  if (rank == 0) moves.open(o.result + ".codecs");
  CodecCalls seen = codec_calls(comm);

  std::unique_ptr<Sharded> sharded;
  if (o.sharded) sharded = std::make_unique<Sharded>(task->nparams(), rank, P);
  for (long ep = 1; ep <= o.epochs; ++ep) {
    shuffle(&shard, &rng);
    for (size_t st = 0; st < std::min(steps, min_steps); ++st) {
      std::vector<size_t> idx(shard.begin() + static_cast<long>(st * B),
                              shard.begin() + static_cast<long>((st + 1) * B));
      task->gradient(w, idx, &g);
      if (rank == 0 && ep == 1) nz_local += count_nonzero(g);
      if (sharded) {
        const std::vector<float>& gs = sharded->reduce_scatter(g, comm);
        const float lr = task->lr();
        const size_t first = sharded->first();
        for (size_t k = 0; k < sharded->shard() && first + k < w.size(); ++k) {
          mom[first + k] = 0.9f * mom[first + k] + gs[k];
          w[first + k] -= lr * mom[first + k];
        }
        sharded->all_gather(&w, comm);
        if (rank == 0 && ep == 1) nz_reduced += count_nonzero(gs) * P, nsteps += 1;
        continue;
      }
      NCCLCHECK(ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat32, ncclAvg, comm, nullptr));
      if (rank == 0 && ep == 1) nz_reduced += count_nonzero(g), nsteps += 1;
      const float lr = task->lr();
      for (size_t i = 0; i < w.size(); ++i) {
        mom[i] = 0.9f * mom[i] + g[i];
        w[i] -= lr * mom[i];
      }
    }
    if (rank == 0) {
      Eval tr = task->evaluate(w, false), te = task->evaluate(w, true);
      res << ep << " " << tr.loss << " " << tr.acc << " " << te.loss << " " << te.acc << "\n";
      res.flush();
      const CodecCalls now = codec_calls(comm);
      moves << codec_moves(seen, now) << "\n";
      seen = now;
    }
  }
  NCCLCHECK(ncclCommDestroy(comm));
  if (rank == 0) {
    unlink(o.id_file.c_str());
    // wire bytes per input byte, from the library's statistics line for this communicator
    double wire = -1;
    std::string sp = perfutil_stats_path();
    std::ifstream sf(sp);
    std::string line, last;
    while (std::getline(sf, line))
      if (!line.empty()) last = line;
    auto sum_key = [&](const std::string& key) {
      double sum = 0;
      for (size_t p = 0; (p = last.find(key, p)) != std::string::npos;) {
        p += key.size();
        sum += std::strtod(last.c_str() + p, nullptr);
      }
      return sum;
    };
    const double in = sum_key("\"bytes_in\": "), sent = sum_key("\"bytes_sent\": ");
    if (in > 0) wire = sent / in;
    std::ofstream info(o.result + ".info");
    const double n = static_cast<double>(g.size()) * std::max(nsteps, 1.0);
    info << nz_local / n << " " << nz_reduced / n << " " << wire << "\n";
  }
  return 0;
}

// Epochs per task: the full run, and --short (the demo's).
long default_epochs(const std::string& task, bool shrt) {
  if (task == "digits") return shrt ? 5 : 10;
  if (task == "digits-wide") return shrt ? 3 : 10;
  return shrt ? 3 : 6;  // text
}

struct Config {
  std::string codec;
  bool ef;
  std::string max_nmse;  // "q2@1e-3": SKETCHCCL_MAX_NMSE for this run (empty: off)
  std::string label() const {
    return codec == "none" ? "exact"
                           : codec + (ef ? "+ef" : "") + (max_nmse.empty() ? "" : "@" + max_nmse);
  }
};

struct Curve {
  std::vector<double> tr_loss, tr_acc, te_loss, te_acc;
  double dens_local = -1, dens_reduced = -1, wire = -1;
  std::vector<std::string> codecs;  // per epoch: "q2:40,q4:3 est_nmse:1.2e-02"
};

bool read_curve(const std::string& path, Curve* c) {
  std::ifstream f(path);
  int ep;
  double a, b, d, e;
  while (f >> ep >> a >> b >> d >> e) {
    c->tr_loss.push_back(a);
    c->tr_acc.push_back(b);
    c->te_loss.push_back(d);
    c->te_acc.push_back(e);
  }
  std::ifstream info(path + ".info");
  info >> c->dens_local >> c->dens_reduced >> c->wire;
  std::ifstream moves(path + ".codecs");
  for (std::string line; std::getline(moves, line);)
    c->codecs.push_back(line);
  return !c->te_acc.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= args.size()) die("option " + a + " needs a value");
      return args[++i];
    };
    long n = 0;
    if (a == "--task") {
      o.task = val();
      if (o.task != "digits" && o.task != "digits-wide" && o.task != "text" && o.task != "all")
        die("--task: digits | digits-wide | text | all");
    } else if (a == "--digits") {
      o.digits = val();
    } else if (a == "--epochs") {
      if (!perfutil::parse_int(val(), 1, 1000, &o.epochs)) die("--epochs: 1..1000");
    } else if (a == "--nranks") {
      if (!perfutil::parse_int(val(), 1, 64, &o.nranks)) die("--nranks: 1..64");
    } else if (a == "--seed") {
      if (!perfutil::parse_int(val(), 0, 1L << 30, &o.seed)) die("--seed: 0..2^30");
    } else if (a == "--configs") {
      o.configs = val();
    } else if (a == "--csv") {
      o.csv = val();
    } else if (a == "--short") {
      o.shrt = true;
    } else if (a == "--sharded") {
      o.sharded = true;
    } else if (a == "--rank") {  // internal: a rank started by the launcher below
      if (!perfutil::parse_int(val(), 0, 63, &n)) die("--rank");
      o.rank = n;
    } else if (a == "--id-file") {
      o.id_file = val();
    } else if (a == "--result") {
      o.result = val();
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "Usage: convergence [--task digits|digits-wide|text|all] [--digits digits.csv]\n"
          "                   [--epochs N]\n"
          "                   [--configs none,q8,q8+ef,q2@1e-3,...] [--nranks N] [--seed S]\n"
          "                   [--short] [--csv FILE] [--sharded]\n"
          "  digits.csv: sklearn/datasets/data/digits.csv.gz of python3-sklearn, decompressed\n"
          "  (perf/get_digits.sh prints its path). --short: fewer epochs (digits 5, digits-wide\n"
          "  3, text 3), one summary line per task (all: digits, digits-wide and text).\n"
          "  codec@B: with SKETCHCCL_MAX_NMSE=B (the accuracy guard); prints the codecs per "
          "epoch.\n"
          "  --sharded: gradients ncclReduceScatter'ed, each rank updates its shard, parameters\n"
          "  all-gathered exactly (default configs none,q8+ef,q4+ef,casq2+ef).\n");
      return 0;
    } else {
      die("unknown option '" + a + "' (see --help)");
    }
  }
  setenv("SKETCHCCL_NCCL_LIB", "none", 0);
  // These gradients are small: compress every call (sharded: every gradient, while the
  // all-gather's calls stay below the threshold, exact).
  setenv("SKETCHCCL_MIN_BYTES", o.sharded ? std::to_string(kShardedMinBytes).c_str() : "0", 1);
  if (o.rank >= 0) return train_rank(o);

  std::vector<std::string> tasks;
  if (o.task == "all")
    tasks = {"digits", "digits-wide", "text"};
  else
    tasks = {o.task};
  for (const std::string& t : tasks) {
    if (t != "text" && o.digits.empty()) die("--digits FILE is needed for the " + t + " task");
  }
  std::vector<Config> configs;
  std::string list = o.configs.empty()
                         ? (o.sharded ? "none,q8+ef,q4+ef,casq2+ef"
                            : o.shrt  ? "none,q8,q4,casq2,casq2+ef,s2,sparse"
                                      : "none,q8,q8+ef,q4,q4+ef,casq2,casq2+ef,s2,sparse")
                         : o.configs;
  std::stringstream ls(list);
  for (std::string c; std::getline(ls, c, ',');) {
    std::string bound;
    const size_t at = c.find('@');
    if (at != std::string::npos) {
      bound = c.substr(at + 1);
      c = c.substr(0, at);
    }
    bool ef = c.size() > 3 && c.substr(c.size() - 3) == "+ef";
    configs.push_back({ef ? c.substr(0, c.size() - 3) : c, ef, bound});
  }
  char tmpl[] = "/tmp/sccl-convergence.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) die("mkdtemp failed");
  const std::string dir = tmpl;
  const std::string exe = perfutil::self_exe();
  setenv("SKETCHCCL_STATS_FILE", (dir + "/stats.%p.json").c_str(), 1);
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    csv << "task,config,epoch,train_loss,train_acc,test_loss,test_acc\n";
  }
  int rc = 0;
  for (const std::string& t : tasks) {
    long epochs = o.epochs ? o.epochs : default_epochs(t, o.shrt);
    std::vector<std::pair<std::string, Curve>> curves;
    if (!o.shrt)
      std::printf("== task %s, %ld ranks, %ld epochs, SGD momentum 0.9, ncclAvg%s\n", t.c_str(),
                  o.nranks, epochs,
                  o.sharded ? ", sharded (ncclReduceScatter, exact all-gather)" : "");
    for (const Config& c : configs) {
      setenv("SKETCHCCL_CODEC", c.codec.c_str(), 1);
      setenv("SKETCHCCL_ERROR_FEEDBACK", c.ef ? "1" : "0", 1);
      setenv("SKETCHCCL_MAX_NMSE", c.max_nmse.empty() ? "0" : c.max_nmse.c_str(), 1);
      std::string result = dir + "/" + t + "-" + c.label() + ".txt";
      std::vector<std::vector<std::string>> argvs;
      for (int r = 0; r < o.nranks; ++r) {
        argvs.push_back({exe, "--task", t, "--digits", o.digits.empty() ? "-" : o.digits,
                         "--epochs", std::to_string(epochs), "--nranks", std::to_string(o.nranks),
                         "--seed", std::to_string(o.seed), "--rank", std::to_string(r), "--id-file",
                         dir + "/id", "--result", result});
        if (o.sharded) argvs.back().push_back("--sharded");
      }
      const auto t0 = std::chrono::steady_clock::now();
      int r = perfutil::run_local_ranks(static_cast<int>(o.nranks), argvs);
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Curve cv;
      if (r != 0 || !read_curve(result, &cv)) {
        std::fprintf(stderr, "convergence: %s %s failed (rc %d)\n", t.c_str(), c.label().c_str(),
                     r);
        rc = 1;
        continue;
      }
      if (o.shrt) {  // the demo keeps these lines in its log, and prints the summary
        std::printf("# %s %s: %.1f s, wire/in %.3f\n", t.c_str(), c.label().c_str(), secs, cv.wire);
      } else {
        std::printf(
            "%-9s wire/in %.3f%s, gradient density %.2f%% per rank, %.2f%% reduced, %.1f s\n",
            c.label().c_str(), cv.wire, o.sharded ? " (with the exact all-gather)" : "",
            100 * cv.dens_local, 100 * cv.dens_reduced, secs);
        std::printf("%-10s epoch:", "");
        for (size_t e = 1; e < cv.te_acc.size(); ++e)
          std::printf(" %2zu: loss %.3f acc %5.1f%% |", e, cv.tr_loss[e], 100 * cv.te_acc[e]);
        std::printf("\n");
        if (!c.max_nmse.empty()) {
          std::printf("%-10s codecs:", "");
          for (size_t e = 0; e < cv.codecs.size(); ++e)
            std::printf(" %2zu: %s |", e + 1, cv.codecs[e].c_str());
          std::printf("\n");
        }
        std::fflush(stdout);
      }
      if (csv.is_open()) {
        for (size_t e = 0; e < cv.te_acc.size(); ++e)
          csv << t << "," << c.label() << "," << e << "," << cv.tr_loss[e] << "," << cv.tr_acc[e]
              << "," << cv.te_loss[e] << "," << cv.te_acc[e] << "\n";
      }
      curves.emplace_back(c.label(), cv);
    }
    // the summary line: final test accuracy against exact
    double exact = -1;
    for (auto& [l, cv] : curves) {
      if (l == "exact") exact = cv.te_acc.back();
    }
    std::string line = "convergence (" + t + (o.sharded ? " sharded" : "") + ", " +
                       std::to_string(o.nranks) + " ranks, " + std::to_string(epochs) +
                       " epochs, final test accuracy):";
    bool first = true;
    for (auto& [l, cv] : curves) {
      char b[96];
      double acc = cv.te_acc.back();
      if (l != "exact" && exact >= 0 && acc == exact)
        std::snprintf(b, sizeof b, "%s %s = exact", first ? "" : ",", l.c_str());
      else if (l != "exact" && exact >= 0)
        std::snprintf(b, sizeof b, "%s %s %.1f%% (%+.1f)", first ? "" : ",", l.c_str(), 100 * acc,
                      std::fabs(acc - exact) < 5e-4 ? 0.0 : 100 * (acc - exact));
      else
        std::snprintf(b, sizeof b, "%s %s %.1f%%", first ? "" : ",", l.c_str(), 100 * acc);
      line += b;
      first = false;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) rc = rc ? rc : 0;
  return rc;
}
