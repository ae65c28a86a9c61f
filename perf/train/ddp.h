// The pieces of the time-to-accuracy benchmark (ddp_train.cc) that carry no I/O: DDP's gradient
// buckets and their launch order, per-step time accounting, the time-to-accuracy computation and
// its summary line. Header-only, tested in perf/train/ddp_test.cc.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace ddp {

// A bucket: the range [begin, end) of the flat gradient, whole tensors.
struct Bucket {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// PyTorch DDP's assignment: the parameter tensors in reverse order (the order a backward pass
// makes their gradients final) fill a bucket until it holds at least cap_bytes (the first bucket:
// first_cap_bytes); a tensor is never split, so one larger than the cap is a bucket of its own.
// tensor_sizes: elements per tensor in the flat vector's order. Buckets come back in launch
// order (bucket 0 holds the last tensors), each contiguous since the tensors are.
inline std::vector<Bucket> make_buckets(const std::vector<size_t>& tensor_sizes, size_t elem_bytes,
                                        size_t cap_bytes, size_t first_cap_bytes) {
  std::vector<Bucket> out;
  size_t end = 0;
  for (size_t n : tensor_sizes)
    end += n;
  Bucket cur{end, end};
  for (size_t t = tensor_sizes.size(); t-- > 0;) {
    cur.begin -= tensor_sizes[t];
    const size_t cap = out.empty() ? first_cap_bytes : cap_bytes;
    if (cur.size() * elem_bytes >= cap) {
      out.push_back(cur);
      cur = Bucket{cur.begin, cur.begin};
    }
  }
  if (cur.size() > 0) out.push_back(cur);
  return out;
}

// Starts each bucket's reduction as soon as every element of it is final, and in bucket order
// (DDP launches bucket k only after buckets 0..k-1, so that every rank issues the same sequence
// of collectives). ready() takes ranges in any order; launch(k) is called once per bucket.
class BucketLauncher {
 public:
  BucketLauncher(std::vector<Bucket> buckets, std::function<void(size_t)> launch)
      : buckets_(std::move(buckets)), launch_(std::move(launch)), done_(buckets_.size(), 0) {}
  // A new step: nothing final, nothing launched.
  void reset() {
    std::fill(done_.begin(), done_.end(), 0);
    next_ = 0;
  }
  void ready(size_t begin, size_t end) {
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const size_t lo = std::max(begin, buckets_[k].begin), hi = std::min(end, buckets_[k].end);
      if (lo < hi) done_[k] += hi - lo;
    }
    while (next_ < buckets_.size() && done_[next_] >= buckets_[next_].size())
      launch_(next_++);
  }
  size_t launched() const { return next_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  std::vector<Bucket> buckets_;
  std::function<void(size_t)> launch_;
  std::vector<size_t> done_;
  size_t next_ = 0;
};

// One step's times (seconds): the forward and backward passes and the optimizer (compute), the
// wait for the reductions after the backward pass (communication not hidden by compute), and the
// CPU the library's threads used meanwhile (codec work and transport).
struct StepTimes {
  double compute = 0, exposed = 0, comm_cpu = 0;
  double total() const { return compute + exposed; }
};

struct StepMeans {
  double compute = 0, exposed = 0, comm_cpu = 0;
  size_t steps = 0;
};
inline StepMeans mean_times(const std::vector<StepTimes>& s) {
  StepMeans m;
  for (const StepTimes& t : s) {
    m.compute += t.compute;
    m.exposed += t.exposed;
    m.comm_cpu += t.comm_cpu;
  }
  m.steps = s.size();
  if (m.steps > 0) {
    m.compute /= static_cast<double>(m.steps);
    m.exposed /= static_cast<double>(m.steps);
    m.comm_cpu /= static_cast<double>(m.steps);
  }
  return m;
}

// A test-accuracy measurement at a point of the run: training wall time so far, accuracy in [0,1].
struct Point {
  double time = 0, acc = 0;
};

// The first training time at which the accuracy reached target; -1 if it never did.
inline double time_to_accuracy(const std::vector<Point>& curve, double target) {
  for (const Point& p : curve) {
    if (p.acc >= target) return p.time;
  }
  return -1;
}

// The target: the exact run's final accuracy less `points` percentage points.
inline double target_of(const std::vector<Point>& exact, double points) {
  return exact.empty() ? -1 : exact.back().acc - points / 100.0;
}

// The demo's line, read by scripts:
//   "  time-to-accuracy TASK CONFIG: T s to A% (R.RRx exact fp32, S.SSx bf16)"
//   "  time-to-accuracy TASK CONFIG: never reached A% (final F%)"
// t, t_exact, t_bf16: times to the target (< 0: not reached); a speed-up against a baseline that
// never reached it is printed as "n/a".
inline std::string summary_line(const std::string& task, const std::string& config, double t,
                                double target, double final_acc, double t_exact, double t_bf16) {
  char b[256];
  if (t < 0) {
    std::snprintf(b, sizeof b, "  time-to-accuracy %s %s: never reached %.1f%% (final %.1f%%)",
                  task.c_str(), config.c_str(), 100 * target, 100 * final_acc);
    return b;
  }
  auto ratio = [&](double base) {
    char r[32];
    if (base < 0 || t <= 0)
      std::snprintf(r, sizeof r, "n/a");
    else
      std::snprintf(r, sizeof r, "%.2fx", base / t);
    return std::string(r);
  };
  std::snprintf(b, sizeof b, "  time-to-accuracy %s %s: %.1f s to %.1f%% (%s exact fp32, %s bf16)",
                task.c_str(), config.c_str(), t, 100 * target, ratio(t_exact).c_str(),
                ratio(t_bf16).c_str());
  return b;
}

}  // namespace ddp
