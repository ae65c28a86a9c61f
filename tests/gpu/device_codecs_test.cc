// The second rung of the device path (SKETCHCCL_DEVICE_CODECS=device, docs/cuda.md): the linear
// codecs' ring kernels on the caller's stream, the proxy moving the packets between pinned memory
// and the transport. Each case runs the same calls twice, standalone, 2 and 4 processes sharing
// one GPU: with the host codecs (the first rung) and with the kernels, and wants the same output
// bytes on every rank (the first rung is the reference: the CPU build's packets), the second run's
// calls on the second rung, the first's not, and no CUDA call on either's proxy (tests/gpu/
// rung_report.h). AllReduce (tests/gpu/gpu_worker.cc: in and out of place, sum and avg, two calls
// each) and ReduceScatter (tests/gpu/reduce_scatter_gpu_worker.cc, the same). Skips without a
// device.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"
#include "tests/gpu/gpu_test_main.h"
#include "tests/gpu/have_device.h"

namespace {

using sketchccl::gpu_test::have_device;
using sketchccl::testing::RankOutput;

std::string g_ar_worker, g_rs_worker, g_fake_nccl;

// `front`: in front of the fake NCCL (tests/fake_nccl), one flat ring over the ranks of this host
// (else one node in front of NCCL forwards), else standalone.
std::vector<std::string> env_for(const std::string& codec, const std::string& rung,
                                 bool front = false) {
  return {front ? "SKETCHCCL_NCCL_LIB=" + g_fake_nccl : "SKETCHCCL_NCCL_LIB=none",
          front ? "SKETCHCCL_HIERARCHY=flat" : "SKETCHCCL_HIERARCHY=auto",
          "SKETCHCCL_TRANSPORT=socket", "SKETCHCCL_MIN_BYTES=0", "SKETCHCCL_TIMEOUT=60",
          "SKETCHCCL_CODEC=" + codec,
          // The ring (two-shot calls take the first rung).
          "SKETCHCCL_ALGO=ring",
          // Several slices per chunk: many flags per step.
          "SKETCHCCL_SLICE_BYTES=65536",
          std::string("SKETCHCCL_DEVICE_CODECS=") + (rung == "2" ? "device" : "host"),
          "GPU_TEST_RUNG=" + rung};
}

// Fewer elements than ranks, a few, and several slices per chunk.
constexpr const char* kCounts = "1,3,100003";

std::vector<RankOutput> run(bool scatter, int nranks, const std::string& codec,
                            const std::string& rung, bool front) {
  const std::string id = sketchccl::testing::new_id_hex();
  const std::string data = codec == "none" ? "int" : "gauss";
  return sketchccl::testing::run_ranks(
      nranks,
      [&](int r) -> std::vector<std::string> {
        if (scatter) {
          return {g_rs_worker, std::to_string(r), std::to_string(nranks), id, kCounts,
                  data,        "output"};
        }
        return {g_ar_worker, "ring", std::to_string(r), std::to_string(nranks), id, kCounts, data};
      },
      env_for(codec, rung, front), 280);
}

// A rank's "CASE <name> HASH <h> <verdict>" lines: name -> "h verdict".
std::map<std::string, std::string> cases_of(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string tag, name, hash_tag, hash, verdict;
    if (!(w >> tag >> name >> hash_tag >> hash) || tag != "CASE" || hash_tag != "HASH") continue;
    std::getline(w, verdict);
    m[name] = hash + verdict;
  }
  return m;
}

struct Case {
  bool scatter;
  int nranks;
  std::string codec;
  bool front = false;
};

class DeviceCodecs : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

TEST_P(DeviceCodecs, TheKernelsOnTheStreamGiveTheHostCodecsBits) {
  const Case c = GetParam();
  if (c.front && g_fake_nccl.empty()) GTEST_SKIP() << "no fake NCCL named";
  const std::vector<RankOutput> host = run(c.scatter, c.nranks, c.codec, "1", c.front);
  const std::vector<RankOutput> dev = run(c.scatter, c.nranks, c.codec, "2", c.front);
  if (!c.scatter) {
    // Every rank's whole result: the same bytes on every rank.
    sketchccl::testing::expect_agreement(host);
    sketchccl::testing::expect_agreement(dev);
  }
  ASSERT_EQ(host.size(), dev.size());
  for (size_t r = 0; r < host.size(); ++r) {
    EXPECT_EQ(host[r].exit_code, 0) << "rank " << r << " (host codecs):\n" << host[r].out;
    EXPECT_EQ(dev[r].exit_code, 0) << "rank " << r << " (device codecs):\n" << dev[r].out;
    const auto h = cases_of(host[r].out), d = cases_of(dev[r].out);
    // 3 sizes x in/out of place x sum/avg x 2 calls, and the rung.
    EXPECT_EQ(h.size(), 25u) << host[r].out;
    for (const auto& [name, got] : h) {
      EXPECT_NE(got.find(" OK"), std::string::npos) << "rank " << r << " host " << name << got;
      auto it = d.find(name);
      if (it == d.end()) {
        ADD_FAILURE() << "rank " << r << ": " << name << " missing from the device run:\n"
                      << dev[r].out;
        continue;
      }
      EXPECT_EQ(it->second, got) << "rank " << r << ": " << name << " differs (device, host)";
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (bool scatter : {false, true}) {
    // Every linear codec's kernels at 2 ranks but q2r (q8r's and q4r's with other bits); at 4
    // the partial sums of steps 1 .. P-2 and the all-gather's forwards.
    for (const char* codec : {"none", "bf16", "fp16", "q8", "q4", "q2", "q8r", "q4r"})
      v.push_back({scatter, 2, codec});
    v.push_back({scatter, 4, "q8"});
    v.push_back({scatter, 2, "q8", true});
    v.push_back({scatter, 4, "q4", true});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Rung2, DeviceCodecs, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.front ? "InFront_" : "") +
                                  (i.param.scatter ? "ReduceScatter_" : "AllReduce_") +
                                  std::to_string(i.param.nranks) + "ranks_" + i.param.codec;
                         });

// Stream order on the second rung: a slow kernel before the call writes the input, a kernel after
// it reads the result; the call returns at once and another stream runs meanwhile
// (gpu_worker.cc's "order").
TEST(DeviceCodecsOrder, EarlierWorkBeforeTheInputLaterWorkAfterTheResult) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  for (int p : {2, 4}) {
    const std::string id = sketchccl::testing::new_id_hex();
    sketchccl::testing::expect_agreement(sketchccl::testing::run_ranks(
        p,
        [&](int r) -> std::vector<std::string> {
          return {g_ar_worker, "order", std::to_string(r), std::to_string(p), id, "1000000"};
        },
        env_for("none", "2"), 280));
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s PATH_TO_gpu_worker PATH_TO_reduce_scatter_gpu_worker "
                 "[PATH_TO_fake_libnccl]\n",
                 argv[0]);
    return 2;
  }
  g_ar_worker = argv[1];
  g_rs_worker = argv[2];
  if (argc > 3) g_fake_nccl = argv[3];
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
