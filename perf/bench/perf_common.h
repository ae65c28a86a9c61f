// Small helpers shared by sketchccl-perf and the convergence benchmark (perf/ only, header-only):
// byte-size parsing, ncclUniqueId as hex, a local N-process launcher, rank discovery from MPI
// launchers, and the id file through which ranks started by someone else meet.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace perfutil {

// "64M", "1G", "4096", "1.5K" -> bytes (binary suffixes, as nccl-tests). False on junk.
inline bool parse_bytes(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || v < 0) return false;
  double mul = 1;
  std::string suf(end);
  if (suf == "" || suf == "B" || suf == "b") {
    mul = 1;
  } else if (suf == "K" || suf == "k" || suf == "KB" || suf == "KiB") {
    mul = 1024.0;
  } else if (suf == "M" || suf == "m" || suf == "MB" || suf == "MiB") {
    mul = 1024.0 * 1024;
  } else if (suf == "G" || suf == "g" || suf == "GB" || suf == "GiB") {
    mul = 1024.0 * 1024 * 1024;
  } else {
    return false;
  }
  *out = static_cast<size_t>(v * mul);
  return true;
}

inline bool parse_int(const std::string& s, long lo, long hi, long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

inline std::string to_hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

inline bool from_hex(const std::string& s, void* p, size_t n) {
  if (s.size() != 2 * n) return false;
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// Rank and size from the environment of a launcher (Open MPI, MPICH/PMI, PMIx, Slurm).
inline bool rank_from_launcher(int* rank, int* nranks, std::string* job) {
  const char* pairs[][3] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid"},
      {"PMI_RANK", "PMI_SIZE", "PMI_JOBID"},
      {"PMIX_RANK", "OMPI_UNIVERSE_SIZE", "PMIX_NAMESPACE"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"}};
  for (auto& p : pairs) {
    const char* r = std::getenv(p[0]);
    const char* n = std::getenv(p[1]);
    if (r == nullptr || n == nullptr) continue;
    *rank = std::atoi(r);
    *nranks = std::atoi(n);
    const char* j = std::getenv(p[2]);
    *job = j != nullptr ? j : "";
    const char* ns = std::getenv("PMIX_NAMESPACE");
    if (job->empty() && ns != nullptr) *job = ns;
    return *nranks > 0 && *rank >= 0 && *rank < *nranks;
  }
  return false;
}

// Rank 0 writes the id (hex) atomically; the others wait for it (up to timeout_s).
inline bool write_id_file(const std::string& path, const std::string& hex, std::string* err) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << hex << "\n";
    if (!f) {
      *err = "cannot write " + tmp + ": " + std::strerror(errno);
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *err = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

inline bool read_id_file(const std::string& path, size_t nbytes, double timeout_s, std::string* hex,
                         std::string* err) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    std::ifstream f(path);
    std::string s;
    if (f && (f >> s) && s.size() == 2 * nbytes) {
      *hex = s;
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *err = "no id in " + path + " after " + std::to_string(static_cast<int>(timeout_s)) +
             " s (rank 0 writes it)";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The local launcher: runs argv_for(r) for r in [0, n), stdout/stderr inherited. When one rank
// fails the others are terminated. SIGINT/SIGTERM to the launcher are passed on. Returns the
// first non-zero exit status (128+signal for a signal), else 0.
inline volatile sig_atomic_t g_launcher_signal = 0;
inline void launcher_on_signal(int sig) {
  g_launcher_signal = sig;
}

inline int run_local_ranks(int n, const std::vector<std::vector<std::string>>& argvs) {
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  struct sigaction sa {};
  sa.sa_handler = launcher_on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  for (int r = 0; r < n; ++r) {
    std::vector<char*> argv;
    for (const std::string& a : argvs[static_cast<size_t>(r)])
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot exec %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    if (pid < 0) {
      std::fprintf(stderr, "fork failed: %s\n", std::strerror(errno));
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGTERM);
      }
      return 1;
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  int first_bad = 0, alive = n;
  bool terminating = false;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[static_cast<size_t>(r)] != pid) continue;
        pids[static_cast<size_t>(r)] = -1;
        --alive;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && first_bad == 0) {
          first_bad = code;
          if (!terminating)
            std::fprintf(stderr, "sketchccl-perf: rank %d %s %d; stopping the others\n", r,
                         WIFEXITED(status) ? "exited with" : "killed by signal",
                         WIFEXITED(status) ? code : WTERMSIG(status));
        }
      }
      continue;
    }
    if ((first_bad != 0 || g_launcher_signal != 0) && !terminating) {
      terminating = true;
      for (pid_t p : pids) {
        if (p > 0) kill(p, g_launcher_signal != 0 ? static_cast<int>(g_launcher_signal) : SIGTERM);
      }
      kill_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      if (first_bad == 0) first_bad = 128 + g_launcher_signal;
    }
    if (terminating && std::chrono::steady_clock::now() > kill_deadline) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      kill_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return first_bad;
}

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

inline bool file_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

}  // namespace perfutil
