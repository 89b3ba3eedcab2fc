// Liveness of the training thread: the heartbeat it beats between steps, evaluation batches and
// waits, and the watchdog thread that notices when it stops, or when a stop request goes unheard.
// A peer whose training thread hangs must not look alive to the swarm, and must still obey SIGTERM.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace gossiptrain::core {

// What the training thread was doing at its last beat.
enum class TrainPhase : int { Step, Hook, Eval, Checkpoint, Linger, Finish };
const char* phase_name(TrainPhase p);

// Beaten by the training thread, read by the watchdog; lock-free.
class Heartbeat {
 public:
  void beat(TrainPhase phase, std::int64_t step);

  struct Seen {
    std::int64_t beats = 0;       // 0: training has not started (the watchdog is not armed)
    double age_s = 0.0;           // seconds since the last beat
    TrainPhase phase = TrainPhase::Step;
    std::int64_t step = 0;
    double slowest_gap_s = 0.0;  // the longest time between two beats so far
  };
  Seen seen() const;

 private:
  static std::int64_t now_ns();
  std::atomic<std::int64_t> beats_{0}, last_ns_{0}, step_{0}, slowest_ns_{0};
  std::atomic<int> phase_{0};
};

struct WatchdogConfig {
  // A stall: no beat for max(stall_after_s, stall_gap_factor x the slowest gap seen so far).
  double stall_after_s = 120.0;
  double stall_gap_factor = 50.0;
  // After stop is set, the process must have finished within this many seconds.
  double stop_grace_s = 10.0;
  double poll_s = 0.2;
};

// Watches a heartbeat and a stop flag on its own thread. on_stall runs once per stall (on the
// watchdog's thread) with a description of the training thread's state; on_recover when beats
// resume. on_stop_overdue runs once when stop stays set for stop_grace_s without the owner
// destroying the watchdog (the process should end there: nothing else will).
class Watchdog {
 public:
  struct Callbacks {
    std::function<void(const std::string& state)> on_stall;
    std::function<void(const std::string& state)> on_recover;
    std::function<void(const std::string& state)> on_stop_overdue;
  };
  Watchdog(const Heartbeat& hb, WatchdogConfig cfg, const std::atomic<bool>& stop, Callbacks cb);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  bool stalled() const { return stalled_.load(); }
  // The stall threshold for what has been seen so far, in seconds.
  static double threshold_s(const WatchdogConfig& cfg, const Heartbeat::Seen& s);
  static std::string describe(const Heartbeat::Seen& s);

 private:
  void loop();

  const Heartbeat& hb_;
  const WatchdogConfig cfg_;
  const std::atomic<bool>& stop_;
  Callbacks cb_;
  std::atomic<bool> stalled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace gossiptrain::core
