#include "core/thread_tuner.hpp"

#include <algorithm>
#include <stdexcept>

namespace gossiptrain::core {

ThreadTuner::ThreadTuner(ThreadTunerConfig cfg)
    : cfg_(cfg), threads_(cfg.many), chosen_(cfg.many), skip_(cfg.warmup_steps) {
  if (cfg_.many < 2) throw std::invalid_argument("ThreadTuner: the pool must have 2 threads or more");
  if (cfg_.window_steps < 1) throw std::invalid_argument("ThreadTuner: window_steps must be >= 1");
}

// The mean step, without the steps over 20 x the median: a thread's waits for its turn on a core
// are the long tail that matters (a median of 0.75 ms hid a mean of 4.4 ms), an evaluation or a
// checkpoint between two steps is not.
double ThreadTuner::typical(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  const double cap = 20.0 * v[v.size() / 2];
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (x <= cap) sum += x, ++n;
  return sum / n;
}

// Starts a phase; returns the thread count when it differs from the current one, else 0.
int ThreadTuner::begin(Phase p, int threads, double now_s) {
  phase_ = p;
  steps_.clear();
  since_s_ = -1;
  skip_ = cfg_.warmup_steps;
  if (p == Phase::Hold) hold_until_s_ = now_s + cfg_.hold_s;
  if (threads == threads_) return 0;
  threads_ = threads;
  return threads;
}

bool ThreadTuner::window_full(double now_s) const {
  return int(steps_.size()) >= cfg_.window_steps && since_s_ >= 0 &&
         now_s - since_s_ >= cfg_.window_s;
}

int ThreadTuner::on_step(double step_s, double now_s) {
  if (phase_ == Phase::Hold)
    return now_s >= hold_until_s_ ? begin(Phase::Many, cfg_.many, now_s) : 0;
  if (skip_ > 0) {  // the steps right after a switch pay for it (threads waking, caches)
    --skip_;
    return 0;
  }
  if (since_s_ < 0) since_s_ = now_s - step_s;
  steps_.push_back(step_s);
  if (!window_full(now_s)) return 0;
  if (phase_ == Phase::Many) {
    med_many_ = typical(steps_);
    return begin(Phase::One, 1, now_s);
  }
  med_one_ = typical(steps_);
  // The current choice stays unless the other is faster by the margin.
  const int before = chosen_;
  if (chosen_ == cfg_.many && med_one_ < med_many_ * (1.0 - cfg_.margin)) chosen_ = 1;
  else if (chosen_ == 1 && med_many_ < med_one_ * (1.0 - cfg_.margin)) chosen_ = cfg_.many;
  if (chosen_ != before) changed_ = true;  // until taken
  return begin(Phase::Hold, chosen_, now_s);
}

}  // namespace gossiptrain::core
