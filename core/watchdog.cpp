// The training thread's heartbeat and the watchdog that reads it (see watchdog.hpp).
#include "core/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace gossiptrain::core {

const char* phase_name(TrainPhase p) {
  switch (p) {
    case TrainPhase::Step: return "training step";
    case TrainPhase::Hook: return "averaging hook";
    case TrainPhase::Eval: return "evaluation";
    case TrainPhase::Checkpoint: return "checkpoint";
    case TrainPhase::Linger: return "lingering";
    case TrainPhase::Finish: return "finishing";
  }
  return "?";
}

std::int64_t Heartbeat::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Heartbeat::beat(TrainPhase phase, std::int64_t step) {
  const std::int64_t now = now_ns();
  const std::int64_t last = last_ns_.exchange(now);
  if (beats_.load(std::memory_order_relaxed) > 0 && now - last > slowest_ns_.load())
    slowest_ns_.store(now - last);
  step_.store(step);
  phase_.store(int(phase));
  beats_.fetch_add(1);
}

Heartbeat::Seen Heartbeat::seen() const {
  Seen s;
  s.beats = beats_.load();
  if (s.beats == 0) return s;
  s.age_s = double(now_ns() - last_ns_.load()) / 1e9;
  s.phase = TrainPhase(phase_.load());
  s.step = step_.load();
  s.slowest_gap_s = double(slowest_ns_.load()) / 1e9;
  return s;
}

Watchdog::Watchdog(const Heartbeat& hb, WatchdogConfig cfg, const std::atomic<bool>& stop,
                   Callbacks cb)
    : hb_(hb), cfg_(cfg), stop_(stop), cb_(std::move(cb)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

double Watchdog::threshold_s(const WatchdogConfig& cfg, const Heartbeat::Seen& s) {
  return std::max(cfg.stall_after_s, cfg.stall_gap_factor * s.slowest_gap_s);
}

std::string Watchdog::describe(const Heartbeat::Seen& s) {
  if (s.beats == 0) return "training not started";
  char b[160];
  std::snprintf(b, sizeof b, "last seen in its %s at step %lld, %.1f s ago (slowest gap so far %.2f s)",
                phase_name(s.phase), static_cast<long long>(s.step), s.age_s, s.slowest_gap_s);
  return b;
}

void Watchdog::loop() {
  using Clock = std::chrono::steady_clock;
  bool overdue_said = false;
  Clock::time_point stop_seen{};
  bool stopping = false;
  std::unique_lock<std::mutex> lk(mu_);
  while (!quit_) {
    cv_.wait_for(lk, std::chrono::duration<double>(cfg_.poll_s), [this] { return quit_; });
    if (quit_) break;
    const Heartbeat::Seen s = hb_.seen();
    if (s.beats > 0) {
      const bool stall = s.age_s > threshold_s(cfg_, s);
      if (stall && !stalled_.exchange(true)) {
        if (cb_.on_stall) cb_.on_stall(describe(s));
      } else if (!stall && stalled_.exchange(false)) {
        if (cb_.on_recover) cb_.on_recover(describe(s));
      }
    }
    if (stop_.load() && !stopping) {
      stopping = true;
      stop_seen = Clock::now();
    }
    if (stopping && !overdue_said &&
        std::chrono::duration<double>(Clock::now() - stop_seen).count() > cfg_.stop_grace_s) {
      overdue_said = true;
      if (cb_.on_stop_overdue) cb_.on_stop_overdue(describe(hb_.seen()));
    }
  }
}

}  // namespace gossiptrain::core
