#include "tests/unit/warn_guard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "src/core/log.h"

namespace sketchccl::testutil {
namespace {

struct Allowance {
  std::string substring;
  int count = 0;
};

struct Registry {
  std::mutex mu;
  int next_id = 0;
  std::map<int, Allowance> allowed;  // by id: the oldest allowance matches first
  std::vector<std::string> unexpected;
};

Registry& registry() {
  static Registry* r = new Registry();  // leaked on purpose: proxy threads may warn during exit
  return *r;
}

void on_warn(const char* line) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [id, a] : r.allowed) {
    if (std::string(line).find(a.substring) != std::string::npos) {
      a.count++;
      return;
    }
  }
  r.unexpected.emplace_back(line);
}

// Fails the test that ends for each unexpected WARN. Registered after GoogleTest's printer, so
// it runs before the printer reports the end of the test (end events go in reverse order).
class WarnListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    for (const std::string& line : take_unexpected_warnings())
      std::fprintf(stderr, "warn_guard: WARN outside any test: %s\n", line.c_str());
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (const std::string& line : take_unexpected_warnings())
      ADD_FAILURE() << "unexpected WARN (use AllowWarnings if it is the point): " << line;
  }
};

[[maybe_unused]] const bool installed = [] {
  log_set_warn_hook(&on_warn);
  ::testing::UnitTest::GetInstance()->listeners().Append(new WarnListener());
  return true;
}();

}  // namespace

AllowWarnings::AllowWarnings(std::string substring) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  id_ = r.next_id++;
  r.allowed[id_].substring = std::move(substring);
}

AllowWarnings::~AllowWarnings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.allowed.erase(id_);
}

int AllowWarnings::count() const {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.allowed.find(id_);
  return it == r.allowed.end() ? 0 : it->second.count;
}

bool AllowWarnings::wait_for(int n, double timeout_s) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (count() < n) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::vector<std::string> take_unexpected_warnings() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::exchange(r.unexpected, {});
}

}  // namespace sketchccl::testutil
