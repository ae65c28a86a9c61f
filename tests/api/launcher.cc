#include "tests/api/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace sketchccl::testing {
namespace {

// The stacks of every thread of `pid` (gdb, when installed), so that a hang is diagnosed by the
// run that met it: a hang under load may not come back when run again.
std::string thread_stacks(pid_t pid) {
  if (access("/usr/bin/gdb", X_OK) != 0) return "(no /usr/bin/gdb: no stacks)\n";
  const std::string cmd = "timeout 60 /usr/bin/gdb -batch -nx -p " + std::to_string(pid) +
                          " -ex 'thread apply all bt' 2>&1";
  std::string text;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
      text.append(buf, n);
    pclose(f);
  }
  return text;
}

}  // namespace

std::vector<RankOutput> run_ranks(int nranks,
                                  const std::function<std::vector<std::string>(int)>& argv_for,
                                  const std::vector<std::string>& env, double timeout_s) {
  std::vector<RankOutput> out(static_cast<size_t>(nranks));
  std::vector<pid_t> pids(static_cast<size_t>(nranks), -1);
  std::vector<int> fds(static_cast<size_t>(nranks), -1);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e)
    envs.emplace_back(*e);
  for (const std::string& e : env)
    envs.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : envs)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> args = argv_for(r);
    std::vector<char*> argv;
    for (std::string& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) continue;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(p[1], 1);
      dup2(p[1], 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    pids[static_cast<size_t>(r)] = pid;
    fds[static_cast<size_t>(r)] = p[0];
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int open_fds = 0;
  for (int fd : fds)
    open_fds += fd >= 0;
  bool killed = false;
  while (open_fds > 0) {
    std::vector<pollfd> pfds;
    for (int fd : fds) {
      if (fd >= 0) pfds.push_back({fd, POLLIN, 0});
    }
    poll(pfds.data(), pfds.size(), 100);
    for (size_t r = 0; r < fds.size(); ++r) {
      if (fds[r] < 0) continue;
      char buf[4096];
      ssize_t n;
      while ((n = read(fds[r], buf, sizeof buf)) > 0)
        out[r].out.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close(fds[r]);
        fds[r] = -1;
        --open_fds;
      }
    }
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] <= 0) continue;
        siginfo_t info{};
        if (waitid(P_PID, static_cast<id_t>(pids[r]), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == 0) {
          char head[128];
          std::snprintf(head, sizeof head,
                        "\n--- launcher: rank %zu still running after %.0f s; its threads:\n", r,
                        timeout_s);
          out[r].out += head + thread_stacks(pids[r]);
        }
        kill(pids[r], SIGKILL);
      }
      killed = true;
    }
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] <= 0) continue;
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (WIFEXITED(status)) {
      out[r].exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      out[r].signal = WTERMSIG(status);
    }
  }
  return out;
}

CheckTally tally_checks(const std::vector<RankOutput>& outs) {
  CheckTally res;
  for (size_t r = 0; r < outs.size(); ++r) {
    res.text += "--- rank " + std::to_string(r) + " (exit " + std::to_string(outs[r].exit_code) +
                ", signal " + std::to_string(outs[r].signal) + ")\n" + outs[r].out;
    if (outs[r].exit_code != 0) res.fails++;
    size_t pos = 0;
    while ((pos = outs[r].out.find("CHECK ", pos)) != std::string::npos) {
      res.checks++;
      const size_t eol = outs[r].out.find('\n', pos);
      if (outs[r].out.substr(pos, eol - pos).find(" FAIL") != std::string::npos) res.fails++;
      pos = eol;
    }
  }
  return res;
}

}  // namespace sketchccl::testing
