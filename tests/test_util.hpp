// Helpers shared by the test binaries.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

namespace gt_test {

// A fresh scratch folder for one test (unique per process and instance), removed with all it
// holds on scope exit (kept when GT_KEEP_TMP is set, to read a failed run's logs). With
// create = false only the path is reserved.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix, bool create = true) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    if (create) std::filesystem::create_directories(path);
  }
  ~TempDir() {
    if (std::getenv("GT_KEEP_TMP") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }

  std::filesystem::path path;
};

// Matches an exception whose what() is not empty and contains part. With CHECK_THROWS_MATCHES it
// also pins the exception type, which CHECK_THROWS_WITH(expr, Catch::Contains(part)) does not:
//   CHECK_THROWS_MATCHES(load(p), ConfigError, gt_test::WhatContains("malformed"));
class WhatContains : public Catch::MatcherBase<std::exception> {
 public:
  explicit WhatContains(std::string part) : part_(std::move(part)) {}
  bool match(const std::exception& e) const override {
    const std::string what = e.what();
    return !what.empty() && what.find(part_) != std::string::npos;
  }
  std::string describe() const override {
    return "has a non-empty what() containing \"" + part_ + "\"";
  }

 private:
  std::string part_;
};

}  // namespace gt_test
