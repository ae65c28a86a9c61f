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

#include <sketchccl/sketchccl.h>
#include "perf/bench/perf_common.h"
#include "perf/train/convergence_tasks.h"
#include "perf/train/train_common.h"

namespace {

using convergence::die;
using convergence::Eval;
using convergence::Rng;
using convergence::shuffle;
using convergence::Task;

struct Options : convergence::RankOptions {
  bool shrt = false;
  bool sharded = false;
  Options() { task = "digits"; }
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
  const std::unique_ptr<Task> task =
      convergence::make_task(o.task, o.digits, static_cast<uint64_t>(o.seed));
  const int rank = static_cast<int>(o.rank), P = static_cast<int>(o.nranks);
  ncclComm_t comm = convergence::join_ranks(o);

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
    if (convergence::parse_rank_option(args, &i, &o)) continue;
    if (a == "--short") {
      o.shrt = true;
    } else if (a == "--sharded") {
      o.sharded = true;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "Usage: convergence [--task digits|digits-wide|text|all] [--digits digits.csv]\n"
          "                   [--epochs N]\n"
          "                   [--configs none,q8,q8+ef,q2@1e-3,...] [--nranks N] [--seed S]\n"
          "                   [--short] [--csv FILE] [--sharded]\n"
          "  digits.csv: sklearn/datasets/data/digits.csv.gz of python3-sklearn, decompressed\n"
          "  (perf/train/get_digits.sh prints its path). --short: fewer epochs (digits 5,\n"
          "  digits-wide 3, text 3), one summary line per task (all: digits, digits-wide, text).\n"
          "  codec@B: with SKETCHCCL_MAX_NMSE=B (the accuracy guard); prints the codecs per "
          "epoch.\n"
          "  --sharded: gradients ncclReduceScatter'ed, each rank updates its shard, parameters\n"
          "  all-gathered exactly (default configs none,q8+ef,q4+ef,casq2+ef).\n");
      return 0;
    } else {
      die("unknown option '" + a + "' (see --help)");
    }
  }
  if (o.task != "digits" && o.task != "digits-wide" && o.task != "text" && o.task != "all")
    die("--task: digits | digits-wide | text | all");
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
  for (const std::string& t : tasks)
    convergence::check_digits(t, o.digits);
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
        convergence::RankOptions ro = o;
        ro.task = t;
        ro.epochs = epochs;
        ro.rank = r;
        ro.id_file = dir + "/id";
        ro.result = result;
        argvs.push_back({exe});
        for (const std::string& x : convergence::rank_args(ro))
          argvs.back().push_back(x);
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
