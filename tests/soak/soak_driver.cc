// sketchccl-soak: the soak driver (tests/soak/soak.sh). Runs of 2-8 standalone ranks
// (sketchccl-soak-worker processes), each run with its own codec, transport and call plan
// (soak_plan.h), some with one rank killed mid-run; counts crashes, hangs and cross-rank
// mismatches (and errors in runs where nothing failed). Exit status 0 when all are zero.
//
//   sketchccl-soak [--seed N] [--calls N] [--seconds S] [--max-ranks P] [--kill-every K]
//                  [--timeout S] [--worker PATH] [--run N] [--keep-logs 1]
//                  [--transports socket|auto|socket,auto]
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/soak/soak_plan.h"

extern char** environ;

namespace {

using sketchccl::soak::mix;
using sketchccl::soak::Rng;
using Clock = std::chrono::steady_clock;

struct Options {
  uint64_t seed = 1;
  long calls = 10000;    // stop starting runs once this many calls ran
  double seconds = 1e9;  // or once this much time passed
  int max_ranks = 8;
  int kill_every = 4;   // every K-th run kills a rank
  double timeout = 20;  // SKETCHCCL_TIMEOUT of the ranks
  std::string worker;
  int only = -1;      // --run N: that run of the seed alone (to reproduce a failure)
  bool keep = false;  // --keep-logs 1: keep every run's rank logs, not only the failing ones'
  // --transports socket: every run on sockets (the short soak of ./run test: UCX 1.13's
  // shared memory fails an endpoint now and then under load, tests/soak/README.md). Default: half
  // the runs on sockets, half on `auto` (UCX where it loads).
  std::string transports = "socket,auto";
};

struct Totals {
  long runs = 0, calls = 0, ok_calls = 0, refused = 0, kills = 0;
  long crashes = 0, hangs = 0, mismatches = 0, errors = 0;
  double max_detect_s = 0;  // a kill to the last survivor's exit
  std::map<std::string, long> codec_runs;
  std::map<std::string, std::pair<long, long>> by_kind;  // succeeded, refused everywhere
};

// One rank's lines.
struct CallLine {
  std::string kind, rc, hash, verdict;
};
struct RankLog {
  std::map<int, CallLine> calls;
  bool failed = false, done = false;
  int failed_call = -1;
  std::string failed_text;
};

RankLog parse_log(const std::string& path) {
  RankLog log;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (tag == "CALL") {
      int i = 0;
      CallLine c;
      std::string type, op, count;
      ls >> i >> c.kind >> type >> op >> count >> c.rc >> c.hash;
      std::getline(ls, c.verdict);
      c.kind += " type " + type + " op " + op + " count " + count;
      log.calls[i] = c;
    } else if (tag == "FAILED") {
      log.failed = true;
      ls >> log.failed_call;
      log.failed_text = line;
    } else if (tag == "DONE") {
      log.done = true;
    }
  }
  return log;
}

std::string tail_of(const std::string& path, size_t bytes = 1500) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > bytes ? "..." + s.substr(s.size() - bytes) : s;
}

off_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

std::string id_hex() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "sketchccl-soak: ncclGetUniqueId failed: %s\n", ncclGetLastError(nullptr));
    std::exit(2);
  }
  std::string hex;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  return hex;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& out) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e)
    envs.emplace_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> envp, args;
  for (std::string& e : envs)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> a = argv;
  for (std::string& s : a)
    args.push_back(s.data());
  args.push_back(nullptr);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  ::close(fd);
  return pid;
}

struct Run {
  int index = 0, nranks = 2, calls = 0, kill_rank = -1, kill_call = -1;
  std::string codec, transport, min_bytes;
  uint64_t seed = 0;
};

Run plan_run(const Options& opt, int index, long calls_left) {
  Rng rng(mix(opt.seed, static_cast<uint64_t>(index)));
  static const char* kCodecs[] = {"none", "sparse", "auto", "q8",    "q4",    "q2",
                                  "bf16", "fp16",   "s2",   "casq2", "casq3", "casq4"};
  Run r;
  r.index = index;
  r.nranks = 2 + static_cast<int>(rng.below(static_cast<uint64_t>(opt.max_ranks - 1)));
  r.codec = kCodecs[rng.below(12)];
  r.transport = rng.chance(0.5) ? "socket" : "auto";  // drawn always: the same plan either way
  if (opt.transports == "socket" || opt.transports == "auto") r.transport = opt.transports;
  r.min_bytes = rng.chance(0.5) ? "0" : "1M";
  r.calls = static_cast<int>(std::min<long>(20 + static_cast<long>(rng.below(100)), calls_left));
  if (r.calls < 1) r.calls = 1;
  r.seed = rng.next();
  if (opt.kill_every > 0 && index % opt.kill_every == opt.kill_every - 1) {
    r.kill_rank = static_cast<int>(rng.below(static_cast<uint64_t>(r.nranks)));
    r.kill_call = static_cast<int>(rng.below(static_cast<uint64_t>(r.calls)));
  }
  return r;
}

// Runs one soak run and adds its figures to `t`; prints one line (more when something is wrong).
void soak_run(const Options& opt, const Run& run, const std::string& dir, Totals* t) {
  const bool lossy = run.codec != "none" && run.codec != "sparse";
  const std::string id = id_hex();
  std::vector<std::string> env = {"SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_CODEC=" + run.codec,
                                  "SKETCHCCL_TRANSPORT=" + run.transport,
                                  "SKETCHCCL_MIN_BYTES=" + run.min_bytes,
                                  "SKETCHCCL_TIMEOUT=" + std::to_string(opt.timeout)};
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < run.nranks; ++r) {
    logs.push_back(dir + "/run" + std::to_string(run.index) + ".rank" + std::to_string(r));
    pids.push_back(
        spawn({opt.worker, std::to_string(run.seed), std::to_string(r), std::to_string(run.nranks),
               id, std::to_string(run.calls), lossy ? "1" : "0",
               std::to_string(r == run.kill_rank ? run.kill_call : -1)},
              env, logs.back()));
  }
  const auto t0 = Clock::now();
  std::vector<int> status(pids.size(), -1);
  std::vector<double> exit_at(pids.size(), -1);
  std::vector<off_t> sizes(pids.size(), 0);
  double progress_at = 0, killed_at = -1;
  std::string hang;
  const double hang_s = opt.timeout + 30, detect_bound = opt.timeout + 15;
  for (;;) {
    const double now = std::chrono::duration<double>(Clock::now() - t0).count();
    int alive = 0;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (exit_at[r] >= 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        exit_at[r] = now;
        progress_at = now;
        if (static_cast<int>(r) == run.kill_rank && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
          killed_at = now;
        }
        continue;
      }
      ++alive;
      const off_t s = file_size(logs[r]);
      if (s != sizes[r]) {
        sizes[r] = s;
        progress_at = now;
      }
    }
    if (alive == 0) break;
    if (killed_at >= 0 && now - killed_at > detect_bound) {
      hang = "survivors still running " + std::to_string(detect_bound) + " s after the kill";
    } else if (now - progress_at > hang_s) {
      hang = "no progress for " + std::to_string(hang_s) + " s";
    }
    if (!hang.empty()) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (exit_at[r] < 0) kill(pids[r], SIGKILL);
      }
      for (size_t r = 0; r < pids.size(); ++r) {
        if (exit_at[r] < 0) waitpid(pids[r], &status[r], 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::string> problems;
  if (!hang.empty()) {
    t->hangs++;
    problems.push_back("HANG: " + hang);
  }
  const bool killed = killed_at >= 0;
  if (killed) {
    t->kills++;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (static_cast<int>(r) != run.kill_rank && exit_at[r] >= 0) {
        t->max_detect_s = std::max(t->max_detect_s, exit_at[r] - killed_at);
      }
    }
  }
  std::vector<RankLog> ranks;
  for (size_t r = 0; r < pids.size(); ++r) {
    ranks.push_back(parse_log(logs[r]));
    const int st = status[r];
    const bool intended = static_cast<int>(r) == run.kill_rank && killed;
    if (intended || !hang.empty()) continue;
    if (WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0)) {
      t->crashes++;
      problems.push_back("CRASH: rank " + std::to_string(r) +
                         (WIFSIGNALED(st) ? " killed by signal " + std::to_string(WTERMSIG(st))
                                          : " exited " + std::to_string(WEXITSTATUS(st))) +
                         "\n" + tail_of(logs[r]));
    } else if (!killed && ranks.back().failed) {
      t->errors++;
      problems.push_back("ERROR (no rank was killed): rank " + std::to_string(r) + ": " +
                         ranks.back().failed_text);
    }
  }
  // Call by call: every rank that printed the call agrees on its code and, where a hash is
  // printed, on the result; a wrong result is a mismatch too. After a kill, only the calls
  // before it are compared across ranks (the survivors' later calls fail at different points).
  long run_calls = 0;
  for (int i = 1; i <= run.calls; ++i) {
    const CallLine* first = nullptr;
    int have = 0;
    bool differs = false;
    for (size_t r = 0; r < ranks.size(); ++r) {
      auto it = ranks[r].calls.find(i);
      if (it == ranks[r].calls.end()) continue;
      const CallLine& c = it->second;
      ++have;
      if (c.verdict.find("BAD") != std::string::npos) {
        t->mismatches++;
        problems.push_back("WRONG: rank " + std::to_string(r) + " call " + std::to_string(i) + " " +
                           c.kind + ":" + c.verdict);
      }
      if (killed && i >= run.kill_call) continue;
      if (first == nullptr) {
        first = &c;
      } else if (c.rc != first->rc || c.hash != first->hash) {
        differs = true;
      }
    }
    if (have == 0) continue;
    ++run_calls;
    if (differs) {
      t->mismatches++;
      std::string what = "MISMATCH: call " + std::to_string(i) + " " + first->kind + ":";
      for (size_t r = 0; r < ranks.size(); ++r) {
        auto it = ranks[r].calls.find(i);
        if (it != ranks[r].calls.end()) {
          what += " r" + std::to_string(r) + "=rc" + it->second.rc + "/" + it->second.hash;
        }
      }
      problems.push_back(what);
    } else if (first != nullptr && have == static_cast<int>(ranks.size())) {
      const std::string kind = first->kind.substr(0, first->kind.find(' '));
      if (first->rc == "0") {
        t->ok_calls++;
        t->by_kind[kind].first++;
      } else if (first->rc == "4" || first->rc == "5") {
        t->refused++;
        t->by_kind[kind].second++;
      }
    }
  }
  t->calls += run_calls;
  t->runs++;
  t->codec_runs[run.codec]++;
  std::printf("run %d: %d ranks, %s, %s, min %s, %ld calls%s: %s (%.1f s)\n", run.index, run.nranks,
              run.codec.c_str(), run.transport.c_str(), run.min_bytes.c_str(), run_calls,
              run.kill_rank >= 0 ? (", kill rank " + std::to_string(run.kill_rank) + " at call " +
                                    std::to_string(run.kill_call))
                                       .c_str()
                                 : "",
              problems.empty() ? "ok" : "FAILED", seconds);
  for (const std::string& p : problems)
    std::printf("  %s\n", p.c_str());
  std::fflush(stdout);
  if (problems.empty() && !opt.keep) {
    for (const std::string& l : logs)
      std::remove(l.c_str());
  }
}

bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) return false;
    if (a == "--seed")
      o->seed = std::strtoull(v, nullptr, 10);
    else if (a == "--calls")
      o->calls = std::atol(v);
    else if (a == "--seconds")
      o->seconds = std::atof(v);
    else if (a == "--max-ranks")
      o->max_ranks = std::atoi(v);
    else if (a == "--kill-every")
      o->kill_every = std::atoi(v);
    else if (a == "--timeout")
      o->timeout = std::atof(v);
    else if (a == "--worker")
      o->worker = v;
    else if (a == "--run")
      o->only = std::atoi(v);
    else if (a == "--keep-logs")
      o->keep = std::atoi(v) != 0;
    else if (a == "--transports" && (std::string(v) == "socket" || std::string(v) == "auto" ||
                                     std::string(v) == "socket,auto"))
      o->transports = v;
    else
      return false;
    ++i;
  }
  return o->max_ranks >= 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, &opt)) {
    std::fprintf(stderr,
                 "usage: %s [--seed N] [--calls N] [--seconds S] [--max-ranks P] "
                 "[--kill-every K] [--timeout S] [--worker PATH] [--run N] [--keep-logs 1] "
                 "[--transports socket|auto|socket,auto]\n",
                 argv[0]);
    return 2;
  }
  if (opt.worker.empty()) {
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
    opt.worker = dir.substr(0, dir.rfind('/') + 1) + "sketchccl-soak-worker";
  }
  setenv("SKETCHCCL_NCCL_LIB", "none", 1);  // the driver hosts the runs' rendezvous roots
  char tmpl[] = "/tmp/sketchccl-soak.XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr) {
    std::perror("sketchccl-soak: mkdtemp");
    return 2;
  }
  std::printf(
      "soak: seed %llu, %ld calls or %.0f s, 2-%d ranks, a kill every %d runs, "
      "SKETCHCCL_TIMEOUT=%g\n",
      static_cast<unsigned long long>(opt.seed), opt.calls, opt.seconds, opt.max_ranks,
      opt.kill_every, opt.timeout);
  Totals t;
  const auto t0 = Clock::now();
  if (opt.only >= 0) {
    soak_run(opt, plan_run(opt, opt.only, opt.calls), dir, &t);
  } else {
    for (int index = 0; t.calls < opt.calls; ++index) {
      if (std::chrono::duration<double>(Clock::now() - t0).count() > opt.seconds) break;
      soak_run(opt, plan_run(opt, index, opt.calls - t.calls), dir, &t);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string codecs;
  for (const auto& kv : t.codec_runs)
    codecs += " " + kv.first + "=" + std::to_string(kv.second);
  std::printf(
      "soak: seed %llu: %ld runs, %ld calls (%ld succeeded everywhere, %ld refused "
      "everywhere), %ld kills, %.0f s\n",
      static_cast<unsigned long long>(opt.seed), t.runs, t.calls, t.ok_calls, t.refused, t.kills,
      seconds);
  std::printf("soak: runs per codec:%s\n", codecs.c_str());
  std::string kinds;
  for (const auto& kv : t.by_kind) {
    kinds += " " + kv.first + " " + std::to_string(kv.second.first) + "/" +
             std::to_string(kv.second.second);
  }
  std::printf("soak: calls succeeded/refused everywhere, by kind:%s\n", kinds.c_str());
  std::printf("soak: longest time from a kill to the last survivor's exit: %.1f s\n",
              t.max_detect_s);
  std::printf("soak: crashes %ld, hangs %ld, mismatches %ld, errors without a kill %ld\n",
              t.crashes, t.hangs, t.mismatches, t.errors);
  const bool clean = t.crashes + t.hangs + t.mismatches + t.errors == 0;
  if (clean && !opt.keep) {
    ::rmdir(dir);
  } else {
    std::printf("soak: the rank logs are in %s\n", dir);
  }
  return clean ? 0 : 1;
}
