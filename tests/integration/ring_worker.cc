// One rank of the transport and bootstrap integration tests: joins the bootstrap of the id given
// on the command line, creates the transport named by SKETCHCCL_TRANSPORT, connects to its
// ring neighbours and exchanges verified messages with both.
//   ring_worker <id-hex> <rank> <nranks> <mode>     mode: ring | die | victim
// Exit: 0 success, 3 an error was reported (printed as "ERROR: ..."), 4 data mismatch,
// 2 usage.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/core/config.h"
#include "tests/integration/ring_common.h"
#include "transport/transport.h"

using namespace sketchccl;
using transport::RequestId;
using transport::Transport;

namespace {

Transport* g_transport = nullptr;

// Reports an error; closes the transport first, as pending requests refer to buffers that the
// caller's stack is about to free.
int fail(const Status& st) {
  std::printf("ERROR: %s\n", st.to_string().c_str());
  std::fflush(stdout);
  if (g_transport != nullptr) g_transport->close();
  return 3;
}

// Waits for every request; returns the first error.
Status wait_all(Transport* t, std::vector<RequestId>* ids, std::vector<size_t>* sizes) {
  std::vector<bool> done(ids->size(), false);
  size_t left = ids->size();
  int idle = 0;
  sizes->assign(ids->size(), 0);
  while (left > 0) {
    SCCL_RETURN_IF_ERROR(t->progress());
    bool any = false;
    for (size_t i = 0; i < ids->size(); ++i) {
      if (done[i]) continue;
      bool d = false;
      size_t b = 0;
      Status st = t->test((*ids)[i], &d, &b);
      if (d) {
        done[i] = true;
        --left;
        any = true;
        (*sizes)[i] = b;
      }
      SCCL_RETURN_IF_ERROR(st);
    }
    if (any) {
      idle = 0;
    } else if (++idle > 200) {
      usleep(idle > 2000 ? 200 : 20);  // oversubscribed CI: do not starve the peers
    } else {
      sched_yield();
    }
  }
  return Status::Ok();
}

struct Msg {
  int peer;
  uint64_t tag;
  std::vector<uint8_t> buf;
  int part;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <id-hex> <rank> <nranks> <ring|die|victim>\n", argv[0]);
    return 2;
  }
  uint8_t id[bootstrap::kUniqueIdBytes];
  if (!itest::from_hex(argv[1], id, sizeof id)) {
    std::fprintf(stderr, "bad id\n");
    return 2;
  }
  int rank = std::atoi(argv[2]);
  int nranks = std::atoi(argv[3]);
  std::string mode = argv[4];
  const Config& cfg = Config::global();
  if (!cfg.status().ok()) return fail(cfg.status());
  double timeout = cfg.get_double(Var::kTimeout);
  alarm(static_cast<unsigned>(timeout * 6 + 20));  // never hang CI, whatever happens

  std::unique_ptr<Transport> t;
  Status st =
      transport::create_transport(transport::TransportOptions::from_config(rank, nranks), &t);
  if (!st.ok()) return fail(st);
  g_transport = t.get();
  bootstrap::JoinResult table;
  st = bootstrap::join(id, rank, nranks, t->address(), cfg.protocol_hash(),
                       bootstrap::Options::from_config(), &table);
  if (!st.ok()) return fail(st);
  if (!table.configs_agree()) return fail(Status(Code::kInvalidUsage, "configurations differ"));
  int left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
  st = t->connect(left, table.addresses[left]);
  if (st.ok()) st = t->connect(right, table.addresses[right]);
  if (!st.ok()) return fail(st);

  if (mode == "victim" || mode == "die") {
    // Large exchanges in a loop; the victim kills itself in the middle of the second one.
    const size_t big = 8u << 20;
    std::vector<uint8_t> sbuf(big, 1), rl(big), rr(big);
    for (int iter = 0; iter < 50; ++iter) {
      std::vector<RequestId> ids(4);
      uint64_t tag = static_cast<uint64_t>(iter);
      st = t->irecv(left, tag * 2, rl.data(), big, &ids[0]);
      if (st.ok()) st = t->irecv(right, tag * 2 + 1, rr.data(), big, &ids[1]);
      if (st.ok()) st = t->isend(right, tag * 2, sbuf.data(), big, &ids[2]);
      if (st.ok()) st = t->isend(left, tag * 2 + 1, sbuf.data(), big, &ids[3]);
      if (!st.ok()) return fail(st);
      if (mode == "victim" && iter == 1) {
        for (int k = 0; k < 50; ++k)
          (void)t->progress();
        std::printf("victim rank %d: killing itself mid-transfer\n", rank);
        std::fflush(stdout);
        kill(getpid(), SIGKILL);
      }
      std::vector<size_t> got;
      st = wait_all(t.get(), &ids, &got);
      if (!st.ok()) return fail(st);
    }
    std::printf("rank %d: no error although a peer died\n", rank);
    return 0;
  }

  // Ring exchange, both directions, several sizes; two messages per (peer, tag) to check the
  // order of matching; odd iterations send before posting the receives (unexpected messages).
  const size_t sizes[] = {0, 1, 8, 4096, 65536 + 3, 1u << 20, (4u << 20) + 1};
  size_t total = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
    size_t size = sizes[si];
    for (int iter = 0; iter < 2; ++iter) {
      uint64_t tag = si * 8 + static_cast<uint64_t>(iter) * 2;
      std::vector<Msg> recvs, sends;
      for (int part = 0; part < 2; ++part) {
        size_t n = part == 0 ? size : size / 2;
        // From the left on `tag`, from the right on `tag + 1`.
        recvs.push_back({left, tag, std::vector<uint8_t>(n + 16, 0xee), part});
        recvs.push_back({right, tag + 1, std::vector<uint8_t>(n + 16, 0xee), part});
        Msg to_right{right, tag, std::vector<uint8_t>(n), part};
        Msg to_left{left, tag + 1, std::vector<uint8_t>(n), part};
        for (size_t i = 0; i < n; ++i) {
          to_right.buf[i] = itest::pattern(rank, right, size, iter, part, i);
          to_left.buf[i] = itest::pattern(rank, left, size, iter, part, i);
        }
        sends.push_back(std::move(to_right));
        sends.push_back(std::move(to_left));
      }
      std::vector<RequestId> rids(recvs.size()), sids(sends.size());
      auto post_recvs = [&] {
        for (size_t i = 0; i < recvs.size(); ++i) {
          SCCL_RETURN_IF_ERROR(t->irecv(recvs[i].peer, recvs[i].tag, recvs[i].buf.data(),
                                        recvs[i].buf.size(), &rids[i]));
        }
        return Status::Ok();
      };
      auto post_sends = [&] {
        for (size_t i = 0; i < sends.size(); ++i) {
          SCCL_RETURN_IF_ERROR(t->isend(sends[i].peer, sends[i].tag, sends[i].buf.data(),
                                        sends[i].buf.size(), &sids[i]));
        }
        return Status::Ok();
      };
      st = iter == 0 ? post_recvs() : post_sends();
      if (st.ok() && iter == 1) {
        for (int k = 0; k < 20; ++k)
          (void)t->progress();  // let messages arrive unexpected
        usleep(2000);
      }
      if (st.ok()) st = iter == 0 ? post_sends() : post_recvs();
      if (!st.ok()) return fail(st);
      std::vector<size_t> rgot, sgot;
      st = wait_all(t.get(), &rids, &rgot);
      if (st.ok()) st = wait_all(t.get(), &sids, &sgot);
      if (!st.ok()) return fail(st);
      for (size_t i = 0; i < recvs.size(); ++i) {
        const Msg& m = recvs[i];
        size_t n = m.part == 0 ? size : size / 2;
        bool ok = rgot[i] == n;
        for (size_t b = 0; ok && b < n; ++b) {
          ok = m.buf[b] == itest::pattern(m.peer, rank, size, iter, m.part, b);
        }
        for (size_t b = n; ok && b < m.buf.size(); ++b)
          ok = m.buf[b] == 0xee;
        if (!ok) {
          std::printf("MISMATCH: rank %d from %d size %zu iter %d part %d (got %zu bytes)\n", rank,
                      m.peer, size, iter, m.part, rgot[i]);
          return 4;
        }
        total += n;
      }
    }
  }
  // A last token around the ring so nobody closes while a neighbour still reads.
  uint8_t token = 1, in_l = 0, in_r = 0;
  std::vector<RequestId> ids(4);
  st = t->irecv(left, 999, &in_l, 1, &ids[0]);
  if (st.ok()) st = t->irecv(right, 998, &in_r, 1, &ids[1]);
  if (st.ok()) st = t->isend(right, 999, &token, 1, &ids[2]);
  if (st.ok()) st = t->isend(left, 998, &token, 1, &ids[3]);
  std::vector<size_t> got;
  if (st.ok()) st = wait_all(t.get(), &ids, &got);
  if (!st.ok()) return fail(st);
  t->close();
  std::printf("rank %d/%d ok: %s, %zu bytes received and verified\n", rank, nranks, t->name(),
              total);
  return 0;
}
