// Picks, by measuring the steps themselves, whether training runs faster on its BLAS pool or on one
// thread. On cores that other work keeps busy, every GEMM handed to a second thread waits for that
// thread's turn on a core (a scheduler wake-up, milliseconds at a load of 20 on 2 cores): measured,
// one epoch of the default MLP took 8.2 s on 2 threads and 2.8 s on 1 (2-core AMD EPYC, load 18).
// On idle cores the pool wins. Which one holds changes with the machine's load, so the choice is
// measured again every hold_s seconds. Pure bookkeeping on step durations: the caller sets the
// thread count it is told to (apps/peer, around the trainer's step hook).
#pragma once

#include <vector>

namespace gossiptrain::core {

struct ThreadTunerConfig {
  int many = 2;             // the pool's size (> 1)
  int warmup_steps = 4;     // steps after a switch that are not measured
  int window_steps = 32;    // measured steps per trial, and at least window_s of them
  double window_s = 0.2;
  double margin = 0.15;     // one thread must be this much faster (and the pool to win it back)
  double hold_s = 30.0;     // seconds between trials
};

class ThreadTuner {
 public:
  explicit ThreadTuner(ThreadTunerConfig cfg);

  // After every training step: its duration and the caller's clock (seconds). Returns the thread
  // count to run the next steps on when it changes, 0 otherwise.
  int on_step(double step_s, double now_s);

  int threads() const { return threads_; }
  // The last trial's typical step on the pool and on one thread (0 before the first): the mean
  // of its steps without those over 20 x the median (evaluations, checkpoints).
  double typical_many_s() const { return med_many_; }
  double typical_one_s() const { return med_one_; }
  // True once after a trial changed the choice, until taken (the caller says so, with the medians).
  bool take_changed() {
    const bool c = changed_;
    changed_ = false;
    return c;
  }

 private:
  enum class Phase { Many, One, Hold };
  int begin(Phase p, int threads, double now_s);
  bool window_full(double now_s) const;
  static double typical(std::vector<double> v);

  ThreadTunerConfig cfg_;
  Phase phase_ = Phase::Many;
  int threads_;
  int chosen_;
  int skip_;
  double since_s_ = -1;  // when the current trial's measured steps began (-1: not yet)
  double hold_until_s_ = 0;
  std::vector<double> steps_;
  double med_many_ = 0, med_one_ = 0;
  bool changed_ = false;
};

}  // namespace gossiptrain::core
