// --max-lag's policy: see lag_bound.hpp.
#include "gossip/exchange/lag_bound.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace gossiptrain::gossip {

LagBound::LagBound(LagBoundConfig cfg) : cfg_(cfg), lag_(cfg.max_lag) {
  if (cfg_.max_lag < 0 || cfg_.fruitless_before_backoff < 1 || cfg_.max_backoff < 1)
    throw std::invalid_argument("lag bound: bad configuration");
}

void LagBound::completed(std::int64_t step, std::uint64_t averaged) {
  seen_ = averaged;
  since_step_ = step;
  fruitless_ = 0;
  if (backing_off()) recovered_ = true;
  lag_ = cfg_.max_lag;
}

bool LagBound::should_wait(std::int64_t step, std::uint64_t averaged) {
  if (cfg_.max_lag <= 0) return false;
  // step < since_step_: restored to an earlier step.
  if (averaged != seen_ || step < since_step_) {
    if (averaged != seen_) completed(step, averaged);
    else since_step_ = step;
    return false;
  }
  if (step - since_step_ < lag_) return false;
  since_step_ = step;  // wait at most once per lag steps, whatever the outcome
  return true;
}

bool LagBound::waited(bool completed_meanwhile) {
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

}  // namespace gossiptrain::gossip
