#include "tests/api/agreement.h"

#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

namespace sketchccl::testing {

std::string new_id_hex() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess) << ncclGetLastError(nullptr);
  std::string hex;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  return hex;
}

void expect_agreement(const std::vector<RankOutput>& ranks, bool expect_exit_zero) {
  std::map<std::string, std::string> hash_of;  // case -> hash on rank 0
  size_t cases0 = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankOutput& ro = ranks[r];
    if (expect_exit_zero) {
      EXPECT_EQ(ro.exit_code, 0) << "rank " << r << " (signal " << ro.signal << ")\n" << ro.out;
    }
    std::istringstream in(ro.out);
    std::string line;
    size_t cases = 0;
    while (std::getline(in, line)) {
      if (line.rfind("CASE ", 0) != 0) continue;
      ++cases;
      std::istringstream ls(line);
      std::string tag, name, hashtag, hash, verdict;
      ls >> tag >> name >> hashtag >> hash >> verdict;
      EXPECT_EQ(verdict, "OK") << "rank " << r << ": " << line;
      if (r == 0) {
        hash_of[name] = hash;
      } else {
        auto it = hash_of.find(name);
        ASSERT_NE(it, hash_of.end()) << "rank " << r << " has a case rank 0 lacks: " << name;
        EXPECT_EQ(it->second, hash) << "ranks 0 and " << r << " differ on " << name;
      }
    }
    if (r == 0) cases0 = cases;
    EXPECT_EQ(cases, cases0) << "rank " << r << " ran a different number of cases\n" << ro.out;
    EXPECT_GT(cases, 0u) << "rank " << r << " ran no case\n" << ro.out;
  }
}

bool case_ok(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CASE " + name + " HASH ", 0) == 0) {
      return line.size() >= 3 && line.compare(line.size() - 3, 3, " OK") == 0;
    }
  }
  return false;
}

Outcome run_scenario(const std::string& worker, const std::string& scenario, int nranks,
                     const std::vector<std::string>& env, const std::vector<std::string>& args,
                     double timeout_s) {
  const std::string id = new_id_hex();
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o;
  o.ranks = run_ranks(
      nranks,
      [&](int r) {
        std::vector<std::string> argv = {worker, scenario, std::to_string(r),
                                         std::to_string(nranks), id};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      },
      env, timeout_s);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

std::string data_for(const std::string& codec) {
  if (codec == "none") return "int";
  if (codec == "sparse" || codec == "s2") return "sparse";
  return "gauss";
}

}  // namespace sketchccl::testing
