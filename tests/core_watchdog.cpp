// The training thread's watchdog: a stall is noticed once and only after the threshold, recovery
// is said, a slow but moving trainer is not a stall, and an unheeded stop request is reported.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/watchdog.hpp"

using namespace gossiptrain::core;
using namespace std::chrono_literals;

namespace {

template <typename Pred>
bool within(std::chrono::milliseconds t, Pred p) {
  const auto end = std::chrono::steady_clock::now() + t;
  while (!p()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

WatchdogConfig fast() {
  WatchdogConfig c;
  c.stall_after_s = 0.3;
  c.stall_gap_factor = 50.0;
  c.stop_grace_s = 0.3;
  c.poll_s = 0.02;
  return c;
}

}  // namespace

TEST_CASE("watchdog: not armed before the first beat, a stall said once, then its recovery",
          "[core]") {
  Heartbeat hb;
  std::atomic<bool> stop{false};
  std::atomic<int> stalls{0}, recoveries{0};
  std::string said;
  Watchdog::Callbacks cb;
  cb.on_stall = [&](const std::string& s) {
    said = s;
    ++stalls;
  };
  cb.on_recover = [&](const std::string&) { ++recoveries; };
  Watchdog w(hb, fast(), stop, cb);
  std::this_thread::sleep_for(500ms);  // no beat yet: training has not started
  CHECK(stalls == 0);
  hb.beat(TrainPhase::Step, 1);
  hb.beat(TrainPhase::Hook, 7);
  REQUIRE(within(3s, [&] { return stalls.load() == 1; }));
  CHECK(w.stalled());
  CHECK(said.find("averaging hook at step 7") != std::string::npos);
  std::this_thread::sleep_for(300ms);
  CHECK(stalls == 1);  // once per stall
  hb.beat(TrainPhase::Step, 8);
  REQUIRE(within(3s, [&] { return recoveries.load() == 1; }));
  CHECK_FALSE(w.stalled());
}

TEST_CASE("watchdog: a trainer that beats steadily, however slowly within the bound, is no stall",
          "[core]") {
  Heartbeat hb;
  std::atomic<bool> stop{false};
  std::atomic<int> stalls{0};
  Watchdog::Callbacks cb;
  cb.on_stall = [&](const std::string&) { ++stalls; };
  Watchdog w(hb, fast(), stop, cb);
  for (int i = 0; i < 40; ++i) {
    hb.beat(TrainPhase::Step, i);
    std::this_thread::sleep_for(20ms);
  }
  CHECK(stalls == 0);
}

TEST_CASE("watchdog: the threshold grows with the slowest gap seen", "[core]") {
  WatchdogConfig c;
  c.stall_after_s = 10;
  c.stall_gap_factor = 50;
  Heartbeat::Seen s;
  s.slowest_gap_s = 0.05;
  CHECK(Watchdog::threshold_s(c, s) == Approx(10.0));
  s.slowest_gap_s = 1.0;
  CHECK(Watchdog::threshold_s(c, s) == Approx(50.0));
  Heartbeat hb;
  hb.beat(TrainPhase::Step, 0);
  std::this_thread::sleep_for(60ms);
  hb.beat(TrainPhase::Step, 1);
  CHECK(hb.seen().slowest_gap_s >= 0.05);
  CHECK(hb.seen().beats == 2);
}

TEST_CASE("watchdog: a stop request not honoured within the grace is reported once", "[core]") {
  Heartbeat hb;
  std::atomic<bool> stop{false};
  std::atomic<int> overdue{0};
  Watchdog::Callbacks cb;
  cb.on_stop_overdue = [&](const std::string&) { ++overdue; };
  Watchdog w(hb, fast(), stop, cb);
  std::this_thread::sleep_for(400ms);
  CHECK(overdue == 0);  // no stop asked
  stop = true;
  std::this_thread::sleep_for(100ms);
  CHECK(overdue == 0);  // still inside the grace
  REQUIRE(within(3s, [&] { return overdue.load() == 1; }));
  std::this_thread::sleep_for(200ms);
  CHECK(overdue == 1);
}
