// The convergence benchmark's tasks: Task, Eval, Rng and loss helpers, Digits, DigitsWide, Text.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace convergence {

[[noreturn]] inline void die(const std::string& msg) {
  std::fprintf(stderr, "convergence: %s\n", msg.c_str());
  std::exit(2);
}

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
inline float softmax_xent(const float* z, int C, int label, float* dz, int* argmax) {
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

  // The parameter tensors' sizes, in the order of the flat vector (DDP's buckets follow them).
  virtual std::vector<size_t> tensor_sizes() const { return {nparams()}; }
  // Called with [begin, end) of the flat vector once that part of the gradient is final.
  using Ready = std::function<void(size_t begin, size_t end)>;
  // The gradient on idx, as a backward pass computes it: whole tensors become final last layer
  // first, and ready() is called for each as soon as it is (the hook DDP's buckets listen to).
  // Default: the gradient, then the whole vector at once.
  virtual void backward(const std::vector<float>& w, const std::vector<size_t>& idx,
                        std::vector<float>* grad, const Ready& ready) const {
    gradient(w, idx, grad);
    ready(0, nparams());
  }
  // The test samples, and how many of [begin, end) the parameters w classify correctly (ranks
  // evaluate their share of the test set).
  virtual size_t ntest() const = 0;
  virtual size_t test_correct(const std::vector<float>& w, size_t begin, size_t end) const = 0;
};

// Vector helpers the MLPs share: y += a * x, and a dot product with eight partial sums (the
// compiler vectorises it without -ffast-math).
inline void axpy(float a, const float* x, float* y, size_t n) {
  for (size_t k = 0; k < n; ++k)
    y[k] += a * x[k];
}
inline float dot(const float* a, const float* b, size_t n) {
  float acc[8] = {};
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (size_t l = 0; l < 8; ++l)
      acc[l] += a[k + l] * b[k + l];
  }
  for (; k < n; ++k)
    acc[k % 8] += a[k] * b[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// A ReLU MLP's parameters laid out layer by layer: each layer's weights input-major (fan_in rows
// of fan_out, so that the passes are row updates that skip the inputs ReLU zeroed), then its
// biases. Batched forward and backward passes over it, layer by layer, so that a layer's
// gradient is final (and handed to ready()) before the layers below it are computed.
class Mlp {
 public:
  explicit Mlp(std::vector<size_t> dims) : dims_(std::move(dims)) {
    size_t at = 0;
    for (size_t l = 0; l + 1 < dims_.size(); ++l) {
      w_.push_back(at);
      at += dims_[l] * dims_[l + 1];
      b_.push_back(at);
      at += dims_[l + 1];
    }
    n_ = at;
  }
  size_t layers() const { return w_.size(); }
  size_t in(size_t l) const { return dims_[l]; }
  size_t out(size_t l) const { return dims_[l + 1]; }
  size_t weights(size_t l) const { return w_[l]; }
  size_t biases(size_t l) const { return b_[l]; }
  size_t nparams() const { return n_; }
  std::vector<size_t> tensor_sizes() const {
    std::vector<size_t> t;
    for (size_t l = 0; l < layers(); ++l) {
      t.push_back(in(l)*out(l));
      t.push_back(out(l));
    }
    return t;
  }
  // He initialisation of the weights in layer order, zero biases.
  void init(std::vector<float>* w, Rng* rng) const {
    w->assign(n_, 0.0f);
    for (size_t l = 0; l < layers(); ++l) {
      const float sd = std::sqrt(2.0f / static_cast<float>(in(l)));
      for (size_t i = 0; i < in(l)*out(l); ++i)
        (*w)[w_[l] + i] = rng->normal() * sd;
    }
  }
  // acts[0] = the B inputs x (B rows of dims[0]); acts[l + 1] = layer l's output (ReLU but the
  // last layer: logits).
  void forward(const float* w, const float* x, size_t B,
               std::vector<std::vector<float>>* acts) const {
    acts->resize(layers() + 1);
    (*acts)[0].assign(x, x + B * dims_[0]);
    for (size_t l = 0; l < layers(); ++l) {
      const std::vector<float>& a = (*acts)[l];
      std::vector<float>& z = (*acts)[l + 1];
      const size_t I = in(l), O = out(l);
      z.resize(B * O);
      for (size_t s = 0; s < B; ++s)
        std::copy(w + b_[l], w + b_[l] + O, z.begin() + static_cast<long>(s * O));
      for (size_t i = 0; i < I; ++i) {
        const float* row = w + w_[l] + i * O;
        for (size_t s = 0; s < B; ++s) {
          const float v = a[s * I + i];
          if (v != 0) axpy(v, row, &z[s * O], O);
        }
      }
      if (l + 1 < layers()) {
        for (float& v : z)
          v = v > 0 ? v : 0;
      }
    }
  }
  // The mean softmax cross-entropy gradient over the B samples of acts (from forward()) into g
  // (zeroed first, same size kept), layer by layer from the last; ready() gets each layer's
  // [weights, biases) range as soon as both are final.
  void backward(const float* w, const std::vector<std::vector<float>>& acts, const int* labels,
                size_t B, std::vector<float>* g, const Task::Ready& ready) const {
    std::fill(g->begin(), g->end(), 0.0f);
    const size_t L = layers(), C = out(L - 1);
    std::vector<float> delta(B * C), below;
    for (size_t s = 0; s < B; ++s) {
      softmax_xent(&acts[L][s * C], static_cast<int>(C), labels[s], &delta[s * C], nullptr);
      for (size_t c = 0; c < C; ++c)
        delta[s * C + c] /= static_cast<float>(B);
    }
    for (size_t l = L; l-- > 0;) {
      const std::vector<float>& a = acts[l];
      const size_t I = in(l), O = out(l);
      float* G = g->data();
      for (size_t i = 0; i < I; ++i) {
        float* grow = G + w_[l] + i * O;
        for (size_t s = 0; s < B; ++s) {
          const float v = a[s * I + i];
          if (v != 0) axpy(v, &delta[s * O], grow, O);
        }
      }
      for (size_t s = 0; s < B; ++s)
        axpy(1.0f, &delta[s * O], G + b_[l], O);
      if (l > 0) {
        below.assign(B * I, 0.0f);
        for (size_t i = 0; i < I; ++i) {
          const float* row = w + w_[l] + i * O;
          for (size_t s = 0; s < B; ++s) {
            if (a[s * I + i] > 0) below[s * I + i] = dot(row, &delta[s * O], O);
          }
        }
      }
      // after the layer's input gradient too: a backward node hands over its gradients at its end
      ready(w_[l], b_[l] + O);
      delta.swap(below);
    }
  }
  // Correct predictions on the n samples x (rows of dims[0]) with labels y, in batches.
  size_t correct(const float* w, const float* x, const int* y, size_t n) const {
    std::vector<std::vector<float>> acts;
    const size_t C = out(layers() - 1);
    size_t ok = 0;
    for (size_t at = 0; at < n; at += 32) {
      const size_t B = std::min<size_t>(32, n - at);
      forward(w, x + at * dims_[0], B, &acts);
      for (size_t s = 0; s < B; ++s) {
        const float* z = &acts.back()[s * C];
        ok += static_cast<size_t>(std::max_element(z, z + C) - z) == static_cast<size_t>(y[at + s]);
      }
    }
    return ok;
  }

 private:
  std::vector<size_t> dims_, w_, b_;
  size_t n_ = 0;
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

// DDP's backward on the digits data: the batch's rows through m's batched passes.
inline void batch_backward(const Mlp& m, const DigitsData& data, const std::vector<float>& w,
                           const std::vector<size_t>& idx, std::vector<float>* g,
                           const Task::Ready& ready) {
  std::vector<float> x;
  std::vector<int> y;
  for (size_t s : idx) {
    x.insert(x.end(), &data.xtr[s * DigitsData::D], &data.xtr[(s + 1) * DigitsData::D]);
    y.push_back(data.ytr[s]);
  }
  std::vector<std::vector<float>> acts;
  m.forward(w.data(), x.data(), idx.size(), &acts);
  if (g->size() != m.nparams()) g->assign(m.nparams(), 0.0f);
  m.backward(w.data(), acts, y.data(), idx.size(), g, ready);
}

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
  size_t ntest() const override { return data_.yte.size(); }
  size_t test_correct(const std::vector<float>& w, size_t begin, size_t end) const override {
    size_t ok = 0;
    for (size_t s = begin; s < end; ++s) {
      float h[H], z[C];
      forward(w, &data_.xte[s * D], h, z);
      ok += static_cast<int>(std::max_element(z, z + C) - z) == data_.yte[s];
    }
    return ok;
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
  std::vector<size_t> tensor_sizes() const override { return mlp_.tensor_sizes(); }
  // The same gradient batched layer by layer (Mlp's layout is this class's).
  void backward(const std::vector<float>& w, const std::vector<size_t>& idx, std::vector<float>* g,
                const Ready& ready) const override {
    batch_backward(mlp_, data_, w, idx, g, ready);
  }
  size_t ntest() const override { return data_.yte.size(); }
  size_t test_correct(const std::vector<float>& w, size_t begin, size_t end) const override {
    return mlp_.correct(w.data(), &data_.xte[begin * D], &data_.yte[begin], end - begin);
  }
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
  Mlp mlp_{{D, H1, H2, C}};
};

// digits-deep: the digits through a deeper, wider MLP, 64-2048-2048-2048-2048-10 (ReLU,
// 12,742,666 parameters, a 48.6 MiB gradient): a model whose gradient takes longer to reduce
// over 1 Gbit/s than its backward pass takes to compute, as on real clusters, and whose hidden
// layers are separate 16 MiB DDP buckets (the first reduced while the layers below compute).
class DigitsDeep : public Task {
 public:
  static constexpr size_t D = 64, H = 2048, C = 10;
  DigitsDeep(const std::string& csv, uint64_t seed) : data_(csv, seed) {}
  size_t nparams() const override { return mlp_.nparams(); }
  size_t ntrain() const override { return data_.ytr.size(); }
  float lr() const override { return 0.02f; }
  int batch() const override { return 8; }
  const char* name() const override { return "digits-deep"; }
  std::vector<size_t> tensor_sizes() const override { return mlp_.tensor_sizes(); }
  void init(std::vector<float>* w, uint64_t seed) const override {
    Rng rng(seed ^ 0xdee9ull);
    mlp_.init(w, &rng);
  }
  void gradient(const std::vector<float>& w, const std::vector<size_t>& idx,
                std::vector<float>* g) const override {
    backward(w, idx, g, [](size_t, size_t) {});
  }
  void backward(const std::vector<float>& w, const std::vector<size_t>& idx, std::vector<float>* g,
                const Ready& ready) const override {
    batch_backward(mlp_, data_, w, idx, g, ready);
  }
  size_t ntest() const override { return data_.yte.size(); }
  size_t test_correct(const std::vector<float>& w, size_t begin, size_t end) const override {
    return mlp_.correct(w.data(), &data_.xte[begin * D], &data_.yte[begin], end - begin);
  }
  Eval evaluate(const std::vector<float>& w, bool test) const override {
    Eval e;  // the accuracy only (the loss is left 0): what the time-to-accuracy run reads
    const auto& X = test ? data_.xte : data_.xtr;
    const auto& Y = test ? data_.yte : data_.ytr;
    e.acc = static_cast<double>(mlp_.correct(w.data(), X.data(), Y.data(), Y.size())) /
            static_cast<double>(Y.size());
    return e;
  }

 private:
  DigitsData data_;
  Mlp mlp_{{D, H, H, H, H, C}};
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
  std::vector<size_t> tensor_sizes() const override {
    return {static_cast<size_t>(V) * E, static_cast<size_t>(C) * E, static_cast<size_t>(C)};
  }
  // gradient()'s sums in its order (the same bits), the classifier's first: it is final before
  // the embedding rows are scattered.
  void backward(const std::vector<float>& w, const std::vector<size_t>& idx, std::vector<float>* g,
                const Ready& ready) const override {
    if (g->size() != nparams()) g->assign(nparams(), 0.0f);
    std::fill(g->begin(), g->end(), 0.0f);
    const float* Wc = w.data() + static_cast<size_t>(V) * E;
    float* Ge = g->data();
    float *Gc = Ge + static_cast<size_t>(V) * E, *gb = Gc + C * E;
    const float inv = 1.0f / static_cast<float>(idx.size());
    std::vector<float> dms(idx.size() * E, 0.0f);
    for (size_t k = 0; k < idx.size(); ++k) {
      const size_t s = idx[k];
      float m[E], z[C], dz[C];
      const int b = otr_[s], e = otr_[s + 1];
      forward(w, &ttr_[static_cast<size_t>(b)], e - b, m, z);
      softmax_xent(z, C, ytr_[s], dz, nullptr);
      float* dm = &dms[k * E];
      for (int c = 0; c < C; ++c) {
        gb[c] += dz[c] * inv;
        for (int j = 0; j < E; ++j) {
          Gc[c * E + j] += dz[c] * m[j] * inv;
          dm[j] += Wc[c * E + j] * dz[c];
        }
      }
    }
    ready(static_cast<size_t>(V) * E, nparams());
    for (size_t k = 0; k < idx.size(); ++k) {
      const int b = otr_[idx[k]], e = otr_[idx[k] + 1];
      const float per = inv / static_cast<float>(e - b);
      for (int t = b; t < e; ++t) {
        float* row = Ge + static_cast<size_t>(ttr_[static_cast<size_t>(t)]) * E;
        for (int j = 0; j < E; ++j)
          row[j] += dms[k * E + static_cast<size_t>(j)] * per;
      }
    }
    ready(0, static_cast<size_t>(V) * E);
  }
  size_t ntest() const override { return yte_.size(); }
  size_t test_correct(const std::vector<float>& w, size_t begin, size_t end) const override {
    size_t ok = 0;
    for (size_t s = begin; s < end; ++s) {
      float m[E], z[C];
      forward(w, &tte_[static_cast<size_t>(ote_[s])], ote_[s + 1] - ote_[s], m, z);
      ok += static_cast<int>(std::max_element(z, z + C) - z) == yte_[s];
    }
    return ok;
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

}  // namespace convergence
