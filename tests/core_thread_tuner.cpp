// core::ThreadTuner: the BLAS pool against one thread, decided by the steps' own durations.
#include <catch2/catch.hpp>

#include "core/thread_tuner.hpp"

using gossiptrain::core::ThreadTuner;
using gossiptrain::core::ThreadTunerConfig;

namespace {

// Feeds steps of step_s(threads) until the tuner has made `decisions` trials; returns the thread
// counts it asked for, in order, and leaves the clock at now.
struct Run {
  ThreadTuner t;
  double now = 0;
  std::vector<int> asked;
  template <class F>
  void steps(int n, F step_s) {
    for (int i = 0; i < n; ++i) {
      const double s = step_s(t.threads());
      now += s;
      if (const int k = t.on_step(s, now); k > 0) asked.push_back(k);
    }
  }
};

ThreadTunerConfig cfg() {
  ThreadTunerConfig c;
  c.many = 4;
  c.warmup_steps = 2;
  c.window_steps = 10;
  c.window_s = 0.0;
  c.hold_s = 1.0;
  return c;
}

}  // namespace

TEST_CASE("the tuner tries one thread and keeps it where steps are faster on it") {
  Run r{ThreadTuner(cfg())};
  // Busy cores: 20 ms a step on the pool, 2 ms on one thread.
  r.steps(30, [](int th) { return th == 1 ? 0.002 : 0.020; });
  REQUIRE(r.asked == std::vector<int>{1});  // tried 1 after the pool's window, and kept it
  CHECK(r.t.threads() == 1);
  CHECK(r.t.take_changed());
  CHECK_FALSE(r.t.take_changed());  // said once
  CHECK(r.t.typical_many_s() == Approx(0.020));
  CHECK(r.t.typical_one_s() == Approx(0.002));
}

TEST_CASE("the tuner goes back to the pool where one thread is not faster by the margin") {
  Run r{ThreadTuner(cfg())};
  // Idle cores: the pool is faster; one thread was tried and given up.
  r.steps(30, [](int th) { return th == 1 ? 0.010 : 0.004; });
  REQUIRE(r.asked == std::vector<int>{1, 4});
  CHECK(r.t.threads() == 4);
  CHECK_FALSE(r.t.take_changed());  // the choice never changed
  // Equal within the margin: the pool stays.
  Run e{ThreadTuner(cfg())};
  e.steps(30, [](int th) { return th == 1 ? 0.0095 : 0.010; });
  CHECK(e.t.threads() == 4);
}

TEST_CASE("the tuner measures again after hold_s, and follows the load back") {
  Run r{ThreadTuner(cfg())};
  bool busy = true;
  auto step = [&](int th) { return busy ? (th == 1 ? 0.002 : 0.020) : (th == 1 ? 0.010 : 0.004); };
  r.steps(30, step);
  REQUIRE(r.t.threads() == 1);
  r.t.take_changed();
  busy = false;  // the other work ends
  r.steps(1000, step);  // well past hold_s (1 s) and one more trial
  CHECK(r.t.threads() == 4);
  CHECK(r.t.take_changed());
  // Asked: 1 (first trial), then at the next trial the pool (4), one thread (1), the pool (4);
  // the trials every hold_s after that try one thread and come back to the pool.
  REQUIRE(r.asked.size() >= 4);
  CHECK(std::vector<int>(r.asked.begin(), r.asked.begin() + 4) == std::vector<int>{1, 4, 1, 4});
  CHECK(r.asked.back() == 4);
}

TEST_CASE("the steps right after a switch are not measured, and one outlier does not decide") {
  Run r{ThreadTuner(cfg())};
  int n = 0;
  // The pool's steps are 4 ms, but for a 1 s step (an evaluation between epochs) in its window:
  // not in the mean (over 20 x the median).
  r.steps(12, [&](int) { return ++n == 5 ? 1.0 : 0.004; });
  r.steps(20, [](int th) { return th == 1 ? 0.010 : 0.004; });
  CHECK(r.t.threads() == 4);
  CHECK(r.t.typical_many_s() == Approx(0.004));
}

TEST_CASE("a tuner needs a pool of two threads or more") {
  ThreadTunerConfig c = cfg();
  c.many = 1;
  CHECK_THROWS_AS(ThreadTuner(c), std::invalid_argument);
}
