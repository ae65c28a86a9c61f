// Unit tests fail on a WARN they did not expect. warn_guard.cc (linked into every unit test
// binary) hooks the logger, collects WARN lines from every thread (proxy threads included) and
// fails the running test at its end for each line no AllowWarnings in force matched.
#pragma once

#include <string>
#include <vector>

namespace sketchccl::testutil {

// While alive, WARN lines containing `substring` are expected, not failures. Declare it where
// the warning is the point of the test (a fixture member covers every test of the fixture).
class AllowWarnings {
 public:
  explicit AllowWarnings(std::string substring);
  ~AllowWarnings();
  AllowWarnings(const AllowWarnings&) = delete;
  AllowWarnings& operator=(const AllowWarnings&) = delete;

  // How many WARN lines this allowance matched so far (to assert that the warning came).
  int count() const;
  // Waits until count() >= n or `timeout_s` passed: for a WARN that another thread logs later
  // (it must land before the test ends, or it fails the next one). Returns count() >= n.
  bool wait_for(int n, double timeout_s) const;

 private:
  int id_;
};

// The unexpected WARN lines since the running test started, taken away (they no longer fail it).
std::vector<std::string> take_unexpected_warnings();

}  // namespace sketchccl::testutil
