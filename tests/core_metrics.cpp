// Tests for the JSON-lines metrics writer: line shape, header fields, and whole lines under
// concurrent writers.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/metrics.hpp"

using namespace gossiptrain::core;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempFile {
  std::string path;
  TempFile() {
    static std::atomic<int> counter{0};
    path = (fs::temp_directory_path() / ("gt_core_metrics_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter++) + ".jsonl"))
               .string();
    fs::remove(path);
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("metrics lines carry t, peer, event and the fields", "[core]") {
  TempFile tmp;
  {
    Metrics m(tmp.path, "peer-a");
    m.emit("step", {{"step", 3}, {"epoch", 0}, {"loss", 1.25}, {"samples_per_s", 1000.5}});
    m.set_peer("peer-b");
    m.emit("eval", {{"epoch", 1}, {"test_acc", 0.875}, {"test_loss", 0.4}});
    m.emit("checkpoint");
    // Flushed per line: visible before the writer is destroyed.
    CHECK(lines_of(tmp.path).size() == 3);
  }
  auto lines = lines_of(tmp.path);
  REQUIRE(lines.size() == 3);
  double last_t = 0.0;
  for (const auto& line : lines) {
    INFO(line);
    CHECK(line.rfind("{\"t\":", 0) == 0);  // t leads, so the file reads well by eye
    json j = json::parse(line);
    REQUIRE(j["t"].is_number());
    CHECK(j["t"].get<double>() >= last_t);
    last_t = j["t"].get<double>();
    CHECK(j["peer"].is_string());
    CHECK(j["event"].is_string());
  }
  json step = json::parse(lines[0]);
  CHECK(step["peer"] == "peer-a");
  CHECK(step["event"] == "step");
  CHECK(step["step"] == 3);
  CHECK(step["loss"] == 1.25);
  CHECK(step["samples_per_s"] == 1000.5);
  json eval = json::parse(lines[1]);
  CHECK(eval["peer"] == "peer-b");
  CHECK(eval["test_acc"] == 0.875);
  CHECK(json::parse(lines[2]).size() == 3);
}

TEST_CASE("metrics t counts seconds since construction", "[core]") {
  TempFile tmp;
  Metrics m(tmp.path, "p");
  double before = m.seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  m.emit("step");
  double after = m.seconds();
  double t = json::parse(lines_of(tmp.path).at(0))["t"].get<double>();
  CHECK(t >= before + 0.019);
  CHECK(t <= after);
}

TEST_CASE("metrics fields cannot shadow the header", "[core]") {
  TempFile tmp;
  Metrics m(tmp.path, "me");
  m.emit("member", {{"peer", "them"}, {"state", "dead"}});
  json j = json::parse(lines_of(tmp.path).at(0));
  CHECK(j["peer"] == "me");
  CHECK(j["event"] == "member");
  CHECK(j["member_peer"] == "them");
  CHECK(j["state"] == "dead");
}

TEST_CASE("metrics tolerate awkward values", "[core]") {
  TempFile tmp;
  Metrics m(tmp.path, "p");
  m.emit("error", {{"reason", std::string("bad \xff utf8 \"quoted\"\n")}, {"loss", NAN}});
  m.emit("odd", json(5));
  auto lines = lines_of(tmp.path);
  REQUIRE(lines.size() == 2);
  json e = json::parse(lines[0]);
  CHECK(e["reason"].get<std::string>().find("quoted") != std::string::npos);
  CHECK(e["loss"].is_null());  // JSON has no NaN
  CHECK(json::parse(lines[1])["value"] == 5);
}

TEST_CASE("metrics appends, and an empty path writes nothing", "[core]") {
  TempFile tmp;
  { Metrics(tmp.path, "a").emit("one"); }
  { Metrics(tmp.path, "b").emit("two"); }
  auto lines = lines_of(tmp.path);
  REQUIRE(lines.size() == 2);
  CHECK(json::parse(lines[1])["peer"] == "b");

  Metrics off("", "p");
  CHECK_NOTHROW(off.emit("step", {{"step", 1}}));
  CHECK(off.seconds() >= 0.0);

  CHECK_THROWS_WITH(Metrics("/nonexistent-dir-gt/m.jsonl", "p"),
                    Catch::Contains("/nonexistent-dir-gt/m.jsonl"));
}

TEST_CASE("concurrent emits produce only whole lines", "[core]") {
  TempFile tmp;
  constexpr int kThreads = 8, kPerThread = 400;
  {
    Metrics m(tmp.path, "p");
    std::vector<std::thread> threads;
    std::string padding(300, 'x');  // long lines make torn writes likely if locking were wrong
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          m.emit("step", {{"thread", t}, {"seq", i}, {"pad", padding}});
          if (i % 100 == 0) m.set_peer("p");
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  auto lines = lines_of(tmp.path);
  REQUIRE(lines.size() == static_cast<std::size_t>(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  double last_t = 0.0;
  for (const auto& line : lines) {
    json j = json::parse(line);  // throws on a torn line
    int t = j["thread"];
    REQUIRE(j["seq"] == next.at(t));  // each thread's lines in its own order
    ++next[t];
    REQUIRE(j["t"].get<double>() >= last_t);
    last_t = j["t"].get<double>();
  }
  for (int n : next) CHECK(n == kPerThread);
}

TEST_CASE("a metrics file that cannot be written is said once, not per line", "[core]") {
  if (!fs::exists("/dev/full")) {
    WARN("skipped: no /dev/full to make writes fail");
    return;
  }
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  {
    Metrics m("/dev/full", "p");  // every write fails with "No space left on device"
    for (int i = 0; i < 5; ++i) m.emit("step", {{"i", i}});
  }
  spdlog::set_default_logger(previous);
  const std::string out = log.str();
  INFO(out);
  CHECK(out.find("metrics: cannot write to /dev/full: No space left on device") !=
        std::string::npos);
  // Said once for the five lost lines.
  CHECK(out.find("cannot write") == out.rfind("cannot write"));
}
