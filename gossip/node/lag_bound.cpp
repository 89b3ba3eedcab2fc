// --max-lag's policy: see lag_bound.hpp.
#include "gossip/node/lag_bound.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace gossiptrain::gossip {

MaxLag MaxLag::steps(int n) {
  if (n < 1) throw std::invalid_argument("max-lag: a number of steps is at least 1");
  return MaxLag(Mode::Steps, n);
}

int MaxLag::resolve(int gossip_every, bool host_memory) const {
  switch (mode_) {
    case Mode::Off: return 0;
    case Mode::Steps: return steps_;
    case Mode::Auto: break;
  }
  return host_memory ? 4 * gossip_every : gossip_every;
}

std::string to_string(const MaxLag& m) {
  switch (m.mode()) {
    case MaxLag::Mode::Off: return "off";
    case MaxLag::Mode::Steps: return std::to_string(m.steps());
    case MaxLag::Mode::Auto: break;
  }
  return "auto";
}

LagBound::LagBound(LagBoundConfig cfg) : cfg_(cfg), lag_(cfg.max_lag), tokens_s_(cfg.burst_s) {
  if (cfg_.max_lag < 0 || cfg_.fruitless_before_backoff < 1 || cfg_.max_backoff < 1 ||
      !(cfg_.share >= 0) || !std::isfinite(cfg_.share) || !(cfg_.burst_s > 0) ||
      !std::isfinite(cfg_.burst_s))
    throw std::invalid_argument("lag bound: bad configuration");
}

void LagBound::completed(std::int64_t step, std::uint64_t averaged) {
  seen_ = averaged;
  since_step_ = step;
  fruitless_ = 0;
  if (backing_off()) recovered_ = true;
  lag_ = cfg_.max_lag;
}

bool LagBound::should_wait(std::int64_t step, std::uint64_t averaged, double train_s) {
  if (cfg_.max_lag <= 0) return false;
  // The budget fills with training time only (the caller's clock leaves waits out).
  if (train_s_ >= 0 && train_s > train_s_)
    tokens_s_ = std::min(cfg_.burst_s, tokens_s_ + cfg_.share * (train_s - train_s_));
  train_s_ = std::max(train_s_, train_s);
  // step < since_step_: restored to an earlier step.
  if (averaged != seen_ || step < since_step_) {
    if (averaged != seen_) completed(step, averaged);
    else since_step_ = step;
    return false;
  }
  if (step - since_step_ < lag_) return false;
  if (cfg_.share > 0 && tokens_s_ <= 0) {
    // Waiting now would cost more than the budget: train on and ask again at the next step,
    // by when an exchange may have averaged or the budget refilled.
    if (deferred_++ == 0) first_deferral_ = true;
    return false;
  }
  since_step_ = step;  // wait at most once per lag steps, whatever the outcome
  return true;
}

bool LagBound::waited(bool completed_meanwhile, double wait_s) {
  if (cfg_.share > 0 && wait_s > 0) tokens_s_ -= wait_s;
  if (completed_meanwhile) {
    // should_wait sees the new count at the next step and resets the backoff.
    return false;
  }
  ++fruitless_;
  if (fruitless_ < cfg_.fruitless_before_backoff) return false;
  const bool started = !backing_off();
  const std::int64_t cap = std::int64_t(cfg_.max_lag) * cfg_.max_backoff;
  lag_ = std::min(cap, lag_ * 2);
  return started;
}

bool LagBound::take_recovered() { return std::exchange(recovered_, false); }

bool LagBound::take_first_deferral() { return std::exchange(first_deferral_, false); }

}  // namespace gossiptrain::gossip
