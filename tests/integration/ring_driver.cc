// Drives one transport and bootstrap integration scenario with real processes: makes a unique id
// (the root listener runs here), starts N ring_worker processes with the environment of the
// scenario, bounds their time, kills leftovers and checks every exit status and message.
//   ring_driver <worker> <nranks> <transport> <ucx_tls|default> <scenario> <timeout_s>
// scenario: ring (all succeed), missing (the last rank never starts; the others must fail with
// a timeout naming it), kill (rank 1 kills itself mid-transfer; all others must fail).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sketchccl_build_config.h"
#include "src/bootstrap/bootstrap.h"
#include "tests/integration/ring_common.h"

using namespace sketchccl;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: %s <worker> <nranks> <transport> <ucx_tls|default> <ring|missing|kill> "
                 "<timeout_s>\n",
                 argv[0]);
    return 2;
  }
  std::string worker = argv[1];
  int nranks = std::atoi(argv[2]);
  std::string kind = argv[3], tls = argv[4], scenario = argv[5];
  double timeout = std::atof(argv[6]);
  if (kind == "ucx" && !SKETCHCCL_HAVE_UCX) {
    std::printf("SKIP: UCX not built\n");
    return 77;
  }
  alarm(static_cast<unsigned>(timeout * 8 + 30));

  // Children inherit these; the driver's own root listener uses the same loopback interface.
  char tbuf[32];
  std::snprintf(tbuf, sizeof tbuf, "%g", timeout);
  setenv("SKETCHCCL_TIMEOUT", tbuf, 1);
  setenv("SKETCHCCL_SOCKET_IFNAME", "lo", 1);
  setenv("SKETCHCCL_TRANSPORT", kind.c_str(), 1);
  if (tls == "default") {
    unsetenv("UCX_TLS");
  } else {
    setenv("UCX_TLS", tls.c_str(), 1);
  }
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);

  uint8_t id[bootstrap::kUniqueIdBytes];
  for (size_t i = 0; i < sizeof id; ++i)
    id[i] = i < 40 ? static_cast<uint8_t>(i * 7 + 1) : 0;
  bootstrap::Options bo;
  bo.timeout_s = timeout;
  bo.ifname = "lo";
  Status st = bootstrap::create_root(id, bo);
  if (!st.ok()) {
    std::printf("FAIL: create_root: %s\n", st.to_string().c_str());
    return 1;
  }
  for (size_t i = 0; i < 40; ++i) {
    if (id[i] != static_cast<uint8_t>(i * 7 + 1)) {
      std::printf("FAIL: create_root changed byte %zu of NCCL's part of the id\n", i);
      return 1;
    }
  }
  std::string idhex = itest::to_hex(id, sizeof id);

  int launched = scenario == "missing" ? nranks - 1 : nranks;
  std::vector<pid_t> pids(launched, -1);
  std::vector<std::string> outs(launched);
  double start = now_s();
  for (int r = 0; r < launched; ++r) {
    char path[] = "/tmp/sccl_itest_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
      std::perror("mkstemp");
      return 1;
    }
    outs[r] = path;
    std::string mode = scenario == "kill" ? (r == 1 ? "victim" : "die") : "ring";
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      std::string rs = std::to_string(r), ns = std::to_string(nranks);
      execl(worker.c_str(), worker.c_str(), idhex.c_str(), rs.c_str(), ns.c_str(), mode.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fd);
    pids[r] = pid;
  }

  // Bounded wait for every child.
  double limit = timeout * 4 + 20;
  std::vector<int> status(launched, -1);
  std::vector<double> finished(launched, 0);
  int left = launched;
  while (left > 0 && now_s() - start < limit) {
    for (int r = 0; r < launched; ++r) {
      if (status[r] != -1) continue;
      int ws = 0;
      if (waitpid(pids[r], &ws, WNOHANG) == pids[r]) {
        status[r] = ws;
        finished[r] = now_s() - start;
        --left;
      }
    }
    usleep(10000);
  }
  bool ok = true;
  for (int r = 0; r < launched; ++r) {
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status[r], 0);
      std::printf("FAIL: rank %d still running after %.0f s: killed (a hang)\n", r, limit);
      ok = false;
      finished[r] = limit;
    }
  }
  for (int r = 0; r < launched; ++r) {
    std::string out = slurp(outs[r]);
    unlink(outs[r].c_str());
    int ws = status[r];
    std::string how = WIFEXITED(ws)
                          ? "exit " + std::to_string(WEXITSTATUS(ws))
                          : "signal " + std::to_string(WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    std::printf("--- rank %d (%s, %.2f s):\n%s", r, how.c_str(), finished[r], out.c_str());
    bool good;
    if (scenario == "ring") {
      good = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    } else if (scenario == "missing") {
      // Everyone fails with a timeout naming the missing rank, within the timeout (+ slack).
      std::string missing = "(" + std::to_string(nranks - 1) + ")";
      good = WIFEXITED(ws) && WEXITSTATUS(ws) == 3 && out.find("timeout") != std::string::npos &&
             out.find(missing) != std::string::npos && finished[r] < timeout + 3;
    } else {  // kill
      if (r == 1) {
        good = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
      } else {
        good = WIFEXITED(ws) && WEXITSTATUS(ws) == 3 && out.find("ERROR") != std::string::npos &&
               finished[r] < timeout * 3 + 10;
      }
    }
    if (!good) {
      std::printf("FAIL: rank %d did not behave as the '%s' scenario requires\n", r,
                  scenario.c_str());
      ok = false;
    }
  }
  std::printf("%s: %s n=%d transport=%s UCX_TLS=%s in %.2f s\n", ok ? "PASS" : "FAIL",
              scenario.c_str(), nranks, kind.c_str(), tls.c_str(), now_s() - start);
  return ok ? 0 : 1;
}
