// Time to accuracy: data-parallel training reduced the way PyTorch DDP does it, per
// configuration (codec, error feedback), against exact fp32 and bf16 on the wire.
//
// Each rank (a process; with --netns PREFIX, rank i runs in network namespace PREFIX<i>, as
// perf/demo/netem.sh --exec makes them) computes real forward and backward passes of one of the
// convergence tasks (perf/train/convergence_tasks.h). The gradient is cut into DDP's buckets
// (the tensors in reverse order, 25 MiB, the first 1 MiB: ddp.h); inside one ncclGroupStart/End
// per step, each bucket's ncclAllReduce (ncclAvg, in place, host memory) is issued as soon as the
// backward pass has made its tensors final, so the library's proxy thread reduces it while the
// layers below are computed; ncclGroupEnd waits for them all before the optimizer step (SGD,
// momentum 0.9). Per step: compute time (forward, backward, optimizer), communication time not
// hidden by compute (the wait in ncclGroupEnd), the CPU time of the library's threads (codecs,
// transport). The ranks evaluate their share of the test set every --eval-every steps with the
// training clock stopped; the time to accuracy is the training time until the test accuracy
// first reaches the exact run's final accuracy less 0.5 points (same seed).
//
//   ddp-train --task digits-wide|digits-deep|text [--digits FILE] [--configs LIST] [--seeds LIST]
//             [--epochs N] [--steps N] [--eval-every N] [--nranks N] [--netns PREFIX] [--bucket-mb
//             M]
//             [--first-bucket-mb M] [--lr X] [--csv FILE] [--label TEXT]
// Every configuration of a seed trains the same model: the initial parameters and the batches
// depend on the seed only, and each run prints their hash, which the launcher checks.
#include <nccl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sketchccl/sketchccl.h>
#include "perf/bench/perf_common.h"
#include "perf/train/convergence_tasks.h"
#include "perf/train/ddp.h"
#include "perf/train/train_common.h"

namespace {

using convergence::die;
using convergence::Rng;
using convergence::shuffle;
using convergence::Task;

using convergence::make_task;

struct Options : convergence::RankOptions {
  std::string seeds = "1", netns, label, dump;
  long eval_every = 0, max_steps = 0, dump_step = 1;
  bool overlap_check = false;
  double bucket_mb = 25, first_bucket_mb = 1, lr = 0;  // lr 0: the task's
  Options() { task = "digits-wide"; }
};

long default_epochs(const std::string& task) {
  if (task == "digits-wide") return 3;
  if (task == "digits-deep") return 2;
  return 2;  // text
}

// Steps between evaluations: about four per epoch.
long default_eval_every(const Task& t, long nranks) {
  const long steps = static_cast<long>(t.ntrain()) / nranks / t.batch();
  return std::max(1L, steps / 4);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_s(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
// CPU time of this process's other threads (the library's proxy and transport threads).
double library_cpu_s() {
  return cpu_s(CLOCK_PROCESS_CPUTIME_ID) - cpu_s(CLOCK_THREAD_CPUTIME_ID);
}

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// This rank's share of the test set, correct predictions summed over the ranks (exact: integers).
double test_accuracy(const Task& t, const std::vector<float>& w, int rank, int P, ncclComm_t comm,
                     uint64_t* correct) {
  const size_t n = t.ntest();
  const size_t lo = n * static_cast<size_t>(rank) / static_cast<size_t>(P);
  const size_t hi = n * static_cast<size_t>(rank + 1) / static_cast<size_t>(P);
  *correct = t.test_correct(w, lo, hi);
  NCCLCHECK(ncclAllReduce(correct, correct, 1, ncclUint64, ncclSum, comm, nullptr));
  return static_cast<double>(*correct) / static_cast<double>(n);
}

// g[n] as a little-endian fp32 .npy file at `pattern` with %r replaced by the rank (what
// sketchccl-perf --data reads: docs/codecs.md's table of dumped gradients).
void dump_npy(const std::string& pattern, int rank, const std::vector<float>& g) {
  std::string path = pattern;
  const size_t at = path.find("%r");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(rank));
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(g.size()) + ",), }";
  header.append(63 - (10 + header.size()) % 64, ' ');  // 64-byte aligned, ending in a newline
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const uint16_t hlen = static_cast<uint16_t>(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&hlen), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(g.data()), static_cast<std::streamsize>(4 * g.size()));
  if (!f) die("cannot write " + path);
}

int train_rank(const Options& o) {
  const std::unique_ptr<Task> task = make_task(o.task, o.digits, static_cast<uint64_t>(o.seed));
  const int rank = static_cast<int>(o.rank), P = static_cast<int>(o.nranks);
  ncclComm_t comm = convergence::join_ranks(o);

  std::vector<float> w, g(task->nparams(), 0.0f), mom(task->nparams(), 0.0f);
  task->init(&w, static_cast<uint64_t>(o.seed));
  std::vector<size_t> shard;
  for (size_t s = static_cast<size_t>(rank); s < task->ntrain(); s += static_cast<size_t>(P))
    shard.push_back(s);
  Rng rng(static_cast<uint64_t>(o.seed) * 1000 + static_cast<uint64_t>(rank));
  const size_t B = static_cast<size_t>(task->batch());
  size_t steps = task->ntrain() / static_cast<size_t>(P) / B;  // every rank the same
  if (o.max_steps > 0) steps = std::min(steps, static_cast<size_t>(o.max_steps));
  const long eval_every = o.eval_every ? o.eval_every : default_eval_every(*task, P);

  const std::vector<ddp::Bucket> buckets = ddp::make_buckets(
      task->tensor_sizes(), sizeof(float), static_cast<size_t>(o.bucket_mb * 1048576.0),
      static_cast<size_t>(o.first_bucket_mb * 1048576.0));
  long step = 0;
  std::vector<float> dumped;  // --dump-grads: this rank's gradient before its reduction
  ddp::BucketLauncher launcher(buckets, [&](size_t k) {
    float* p = g.data() + buckets[k].begin;
    if (!o.dump.empty() && step + 1 == o.dump_step) {
      dumped.resize(g.size());
      std::copy(p, p + buckets[k].size(), dumped.begin() + static_cast<long>(buckets[k].begin));
    }
    NCCLCHECK(ncclAllReduce(p, p, buckets[k].size(), ncclFloat32, ncclAvg, comm, nullptr));
  });

  std::ofstream res;
  uint64_t hash = fnv(0xcbf29ce484222325ull, w.data(), w.size() * sizeof(float));
  if (rank == 0) {
    res.open(o.result);
    res << "buckets";
    for (const ddp::Bucket& b : buckets)
      res << " " << b.begin << ":" << b.end;
    res << "\n";
  }
  uint64_t correct = 0;
  double clock = 0;  // training time: the steps only, evaluation excluded
  auto evaluate = [&](long step) {
    const double acc = test_accuracy(*task, w, rank, P, comm, &correct);
    if (rank == 0) res << "eval " << step << " " << clock << " " << acc << "\n" << std::flush;
  };
  evaluate(0);
  for (long ep = 1; ep <= o.epochs; ++ep) {
    shuffle(&shard, &rng);
    for (size_t st = 0; st < steps; ++st) {
      std::vector<size_t> idx(shard.begin() + static_cast<long>(st * B),
                              shard.begin() + static_cast<long>((st + 1) * B));
      if (step == 0) hash = fnv(hash, idx.data(), idx.size() * sizeof(size_t));
      const double t0 = now_s(), c0 = library_cpu_s();
      NCCLCHECK(ncclGroupStart());
      launcher.reset();
      task->backward(w, idx, &g, [&](size_t b, size_t e) { launcher.ready(b, e); });
      if (launcher.launched() != buckets.size()) die("a bucket was never launched");
      const double t1 = now_s();
      NCCLCHECK(ncclGroupEnd());
      const double t2 = now_s();
      const float lr = o.lr > 0 ? static_cast<float>(o.lr) : task->lr();
      for (size_t i = 0; i < w.size(); ++i) {
        mom[i] = 0.9f * mom[i] + g[i];
        w[i] -= lr * mom[i];
      }
      const double t3 = now_s(), c1 = library_cpu_s();
      clock += t3 - t0;
      ++step;
      if (!dumped.empty() && step == o.dump_step) dump_npy(o.dump, rank, dumped);
      if (rank == 0)
        res << "step " << (t1 - t0) + (t3 - t2) << " " << t2 - t1 << " " << c1 - c0 << "\n";
      if (step % eval_every == 0 && !(ep == o.epochs && st + 1 == steps)) evaluate(step);
    }
  }
  evaluate(step);
  sketchcclCommStats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  const bool have_stats = sketchcclCommGetStats(comm, &s) == 0 && s.bytes_in > 0;
  NCCLCHECK(ncclCommDestroy(comm));
  if (rank == 0) {
    char hx[32];
    std::snprintf(hx, sizeof hx, "%016llx", static_cast<unsigned long long>(hash));
    res << "hash " << hx << "\n";
    res << "wire " << (have_stats ? static_cast<double>(s.bytes_sent) / s.bytes_in : -1.0) << "\n";
    unlink(o.id_file.c_str());
  }
  return 0;
}

// --overlap-check, one rank: what the training loop's overlap rests on. An AllReduce issued
// inside a group must progress while the caller does other work before ncclGroupEnd: the time
// left to wait at ncclGroupEnd after other work as long as the AllReduce alone must be well
// below the AllReduce's own time. Rank 0 prints both; exit status 1 when it does not hold.
int overlap_rank(const Options& o) {
  const int rank = static_cast<int>(o.rank);
  ncclComm_t comm = convergence::join_ranks(o);
  std::vector<float> buf(size_t{4} << 20, 1.0f);  // 16 MiB
  auto allreduce = [&] {
    NCCLCHECK(
        ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclAvg, comm, nullptr));
  };
  allreduce();  // connections and buffers
  double alone = 0;
  for (int k = 0; k < 3; ++k) {
    const double t0 = now_s();
    allreduce();
    alone = std::max(alone, now_s() - t0);
  }
  int held = 0;
  double left = 0;
  for (int k = 0; k < 3; ++k) {
    NCCLCHECK(ncclGroupStart());
    allreduce();
    // other work as long as the AllReduce alone (a sleep: no CPU taken from the proxy thread)
    usleep(static_cast<useconds_t>(1.5e6 * alone));
    const double t1 = now_s();
    NCCLCHECK(ncclGroupEnd());
    left = now_s() - t1;
    if (left < 0.5 * alone) ++held;
  }
  // every rank's verdict: the other ranks' waits are summed into rank 0's answer
  int32_t bad = held >= 2 ? 0 : 1;
  NCCLCHECK(ncclAllReduce(&bad, &bad, 1, ncclInt32, ncclSum, comm, nullptr));
  NCCLCHECK(ncclCommDestroy(comm));
  if (rank == 0) {
    std::printf(
        "overlap: a 16 MiB AllReduce alone %.1f ms; issued inside a group, %.1f ms left "
        "at ncclGroupEnd after %.1f ms of other work (last of 3); %s\n",
        1e3 * alone, 1e3 * left, 1.5e3 * alone,
        bad == 0 ? "it progresses before ncclGroupEnd"
                 : "NOT overlapped: the work waits for ncclGroupEnd");
    unlink(o.id_file.c_str());
  }
  return bad == 0 ? 0 : 1;
}

// A configuration: its label ("fp32", "bf16", "q4+ef"), the codec and error feedback.
struct Config {
  std::string label, codec;
  bool ef = false;
};
Config parse_config(const std::string& c) {
  Config out;
  out.label = c;
  std::string name = c;
  if (name.size() > 3 && name.compare(name.size() - 3, 3, "+ef") == 0) {
    out.ef = true;
    name.resize(name.size() - 3);
  }
  if (name == "fp32" || name == "exact" || name == "none") {
    if (out.ef) die("--configs: fp32 has no error feedback");
    out.label = "fp32";
    name = "none";
  }
  out.codec = name;
  return out;
}

struct Run {
  std::vector<ddp::Point> curve;
  std::vector<ddp::StepTimes> steps;
  std::string hash, buckets;
  double wire = -1;
  bool ok = false;
};
Run read_run(const std::string& path) {
  Run r;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::stringstream ss(line);
    std::string key;
    ss >> key;
    if (key == "eval") {
      long step;
      ddp::Point p;
      ss >> step >> p.time >> p.acc;
      r.curve.push_back(p);
    } else if (key == "step") {
      ddp::StepTimes t;
      ss >> t.compute >> t.exposed >> t.comm_cpu;
      r.steps.push_back(t);
    } else if (key == "hash") {
      ss >> r.hash;
    } else if (key == "wire") {
      ss >> r.wire;
      r.ok = true;  // the last line: the run finished
    } else if (key == "buckets") {
      std::getline(ss, r.buckets);
    }
  }
  r.ok = r.ok && !r.curve.empty();
  return r;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto val = [&] { return convergence::option_value(args, &i); };
    if (convergence::parse_rank_option(args, &i, &o)) continue;  // --seed: internal, a rank's
    if (a == "--seeds") {
      o.seeds = val();
    } else if (a == "--eval-every") {
      if (!perfutil::parse_int(val(), 1, 1000000, &o.eval_every)) die("--eval-every: 1..1000000");
    } else if (a == "--steps") {
      if (!perfutil::parse_int(val(), 1, 1000000, &o.max_steps)) die("--steps: 1..1000000");
    } else if (a == "--netns") {
      o.netns = val();
    } else if (a == "--bucket-mb" || a == "--first-bucket-mb" || a == "--lr") {
      const std::string v = val();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x > 0) || x > 4096)
        die(a + (a == "--lr" ? ": a learning rate > 0" : ": a size in MiB"));
      (a == "--bucket-mb" ? o.bucket_mb : a == "--lr" ? o.lr : o.first_bucket_mb) = x;
    } else if (a == "--overlap-check") {
      o.overlap_check = true;
    } else if (a == "--label") {
      o.label = val();
    } else if (a == "--dump-grads") {
      o.dump = val();
    } else if (a == "--dump-step") {
      if (!perfutil::parse_int(val(), 1, 1000000, &o.dump_step)) die("--dump-step: 1..1000000");
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "Usage: ddp-train --task digits-wide|digits-deep|text [--digits digits.csv]\n"
          "                 [--configs fp32,bf16,q8,q4,q4+ef,casq2+ef,auto] [--seeds 1,2,3]\n"
          "                 [--epochs N] [--steps N] [--eval-every STEPS] [--nranks N]\n"
          "                 [--netns PREFIX]\n"
          "                 [--bucket-mb 25] [--first-bucket-mb 1] [--lr X] [--csv FILE]\n"
          "                 [--label TEXT] [--dump-grads FILE%%r.npy [--dump-step N]]\n"
          "  DDP-style training (buckets in reverse layer order, each AllReduce issued when its\n"
          "  bucket is final, overlapped with the rest of the backward pass), per configuration;\n"
          "  prints per-step times and one time-to-accuracy line per configuration. --netns:\n"
          "  rank i runs in namespace PREFIX<i> (perf/demo/netem.sh --exec makes them), UCX\n"
          "  over tcp on eth0. --steps: at most N steps per epoch. --csv: task,config,seed,\n"
          "  time_s,test_acc per evaluation. --overlap-check: checks that an AllReduce issued\n"
          "  inside a group progresses before ncclGroupEnd (what the overlap rests on).\n"
          "  --dump-grads: each rank writes its gradient of step N (default 1) before the\n"
          "  reduction as .npy, %%r the rank (sketchccl-perf --data FILE%%r.npy reads them).\n");
      return 0;
    } else {
      die("unknown option '" + a + "' (see --help)");
    }
  }
  if (o.task != "digits-wide" && o.task != "digits-deep" && o.task != "text")
    die("--task: digits-wide | digits-deep | text");
  convergence::check_digits(o.task, o.digits);
  setenv("SKETCHCCL_NCCL_LIB", "none", 0);
  if (o.rank >= 0) return o.overlap_check ? overlap_rank(o) : train_rank(o);
  if (o.overlap_check) {
    char tmpl[] = "/tmp/sccl-ddp.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) die("mkdtemp failed");
    const std::string dir = tmpl, exe = perfutil::self_exe();
    std::vector<std::vector<std::string>> argvs;
    for (int r = 0; r < o.nranks; ++r)
      argvs.push_back({exe, "--overlap-check", "--task", o.task, "--digits",
                       o.digits.empty() ? "-" : o.digits, "--nranks", std::to_string(o.nranks),
                       "--rank", std::to_string(r), "--id-file", dir + "/id"});
    const int r = perfutil::run_local_ranks(static_cast<int>(o.nranks), argvs);
    const std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) return 1;
    return r;
  }

  if (o.epochs == 0) o.epochs = default_epochs(o.task);
  std::vector<Config> configs;
  for (const std::string& c :
       split(o.configs.empty() ? (o.task == "text" ? "fp32,bf16,q8,sparse,s2"
                                                   : "fp32,bf16,q8,q4,q4+ef,casq2+ef,auto")
                               : o.configs))
    configs.push_back(parse_config(c));
  bool have_exact = false;
  for (const Config& c : configs)
    have_exact = have_exact || c.label == "fp32";
  if (!have_exact) die("--configs: fp32 is needed (the target is its final accuracy)");
  std::vector<long> seeds;
  for (const std::string& s : split(o.seeds)) {
    long v = 0;
    if (!perfutil::parse_int(s, 0, 1L << 30, &v)) die("--seeds: numbers 0..2^30, comma-separated");
    seeds.push_back(v);
  }
  if (seeds.empty()) die("--seeds: at least one");
  if (!o.netns.empty()) {  // over the emulated network: UCX over TCP on the namespace's link
    setenv("SKETCHCCL_TRANSPORT", "ucx", 0);
    setenv("UCX_TLS", "tcp", 0);
    setenv("UCX_NET_DEVICES", "eth0", 0);
    setenv("SKETCHCCL_SOCKET_IFNAME", "=eth0", 0);
  }
  char tmpl[] = "/tmp/sccl-ddp.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) die("mkdtemp failed");
  const std::string dir = tmpl, exe = perfutil::self_exe();
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) die("cannot write " + o.csv);
    csv << "task,config,seed,time_s,test_acc\n";
  }
  {
    const std::unique_ptr<Task> t = make_task(o.task, o.digits, static_cast<uint64_t>(seeds[0]));
    std::printf(
        "== ddp-train %s: %zu parameters, %ld ranks%s, batch %d per rank, lr %g, %ld epochs, "
        "seeds %s; DDP buckets %.0f MiB (first %.0f MiB)\n",
        o.task.c_str(), t->nparams(), o.nranks,
        o.label.empty() ? "" : (" (" + o.label + ")").c_str(), t->batch(),
        o.lr > 0 ? o.lr : static_cast<double>(t->lr()), o.epochs, o.seeds.c_str(), o.bucket_mb,
        o.first_bucket_mb);
  }
  std::fflush(stdout);
  std::map<std::string, std::vector<Run>> runs;  // per config label, per seed
  int rc = 0;
  for (long seed : seeds) {
    std::string seed_hash;
    for (const Config& c : configs) {
      setenv("SKETCHCCL_CODEC", c.codec.c_str(), 1);
      setenv("SKETCHCCL_ERROR_FEEDBACK", c.ef ? "1" : "0", 1);
      const std::string result = dir + "/" + c.label + "-" + std::to_string(seed) + ".txt";
      std::vector<std::vector<std::string>> argvs;
      for (int r = 0; r < o.nranks; ++r) {
        std::vector<std::string> v;
        if (!o.netns.empty())
          v = {"/usr/bin/env", "ip", "netns", "exec", o.netns + std::to_string(r), exe};
        else
          v = {exe};
        convergence::RankOptions ro = o;
        ro.seed = seed;
        ro.rank = r;
        ro.id_file = dir + "/id";
        ro.result = result;
        for (const std::string& x : convergence::rank_args(ro))
          v.push_back(x);
        for (const std::string& x :
             {std::string("--bucket-mb"), std::to_string(o.bucket_mb),
              std::string("--first-bucket-mb"), std::to_string(o.first_bucket_mb)})
          v.push_back(x);
        if (o.lr > 0) {
          char lr[32];
          std::snprintf(lr, sizeof lr, "%.9g", o.lr);
          v.push_back("--lr");
          v.push_back(lr);
        }
        if (o.max_steps) {
          v.push_back("--steps");
          v.push_back(std::to_string(o.max_steps));
        }
        if (o.eval_every) {
          v.push_back("--eval-every");
          v.push_back(std::to_string(o.eval_every));
        }
        if (!o.dump.empty()) {
          for (const std::string& x : {std::string("--dump-grads"), o.dump,
                                       std::string("--dump-step"), std::to_string(o.dump_step)})
            v.push_back(x);
        }
        argvs.push_back(v);
      }
      const double t0 = now_s();
      const int r = perfutil::run_local_ranks(static_cast<int>(o.nranks), argvs);
      const double wall = now_s() - t0;
      Run run = read_run(result);
      if (r != 0 || !run.ok) {
        std::fprintf(stderr, "ddp-train: %s %s seed %ld failed (rc %d)\n", o.task.c_str(),
                     c.label.c_str(), seed, r);
        rc = 1;
        runs[c.label].push_back(Run{});
        continue;
      }
      if (seed_hash.empty()) seed_hash = run.hash;
      if (run.hash != seed_hash) {
        std::fprintf(stderr, "ddp-train: %s seed %ld trained another model (hash %s, not %s)\n",
                     c.label.c_str(), seed, run.hash.c_str(), seed_hash.c_str());
        rc = 1;
      }
      const ddp::StepMeans m = ddp::mean_times(run.steps);
      std::printf(
          "  %-9s seed %ld: final %.1f%%, %.1f s training (%.1f s wall), %zu steps; per "
          "step: compute %.1f ms, exposed comm %.1f ms, library CPU %.1f ms; wire/in "
          "%.3f; model %s; buckets%s\n",
          c.label.c_str(), seed, 100 * run.curve.back().acc, run.curve.back().time, wall, m.steps,
          1e3 * m.compute, 1e3 * m.exposed, 1e3 * m.comm_cpu, run.wire, run.hash.c_str(),
          run.buckets.c_str());
      std::fflush(stdout);
      if (csv.is_open()) {
        for (const ddp::Point& p : run.curve)
          csv << o.task << "," << c.label << "," << seed << "," << p.time << "," << p.acc << "\n";
      }
      runs[c.label].push_back(run);
    }
  }
  // Per configuration: the time to the target of each seed (the exact run of that seed less 0.5
  // points), averaged; a configuration that missed it in any seed never reached it.
  struct Summary {
    double t = -1, target = 0, final_acc = 0;
  };
  std::map<std::string, Summary> sums;
  for (const Config& c : configs) {
    Summary s;
    double tsum = 0;
    bool all = true;
    size_t n = 0;
    for (size_t k = 0; k < seeds.size(); ++k) {
      const Run& ex = runs["fp32"][k];
      const Run& r = runs[c.label][k];
      if (!ex.ok || !r.ok) {
        all = false;
        continue;
      }
      const double target = ddp::target_of(ex.curve, 0.5);
      const double t = ddp::time_to_accuracy(r.curve, target);
      s.target += target;
      s.final_acc += r.curve.back().acc;
      ++n;
      if (t < 0) all = false;
      tsum += t;
    }
    if (n == 0) continue;
    s.target /= static_cast<double>(n);
    s.final_acc /= static_cast<double>(n);
    if (all) s.t = tsum / static_cast<double>(n);
    sums[c.label] = s;
  }
  const double t_exact = sums.count("fp32") ? sums["fp32"].t : -1;
  const double t_bf16 = sums.count("bf16") ? sums["bf16"].t : -1;
  for (const Config& c : configs) {
    if (!sums.count(c.label)) continue;
    const Summary& s = sums[c.label];
    std::printf(
        "%s\n",
        ddp::summary_line(o.task, c.label, s.t, s.target, s.final_acc, t_exact, t_bf16).c_str());
  }
  std::fflush(stdout);
  const std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) rc = rc ? rc : 1;
  return rc;
}
