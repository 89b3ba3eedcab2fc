// --max-lag's policy (apps/common/node.cpp runs the waits): when training should stop to wait for
// an averaging exchange, and the backoff that stops it waiting for exchanges that cannot succeed.
// Pure bookkeeping on step counts, no clock and no network, so tests drive it step by step.
#pragma once

#include <cstdint>

namespace gossiptrain::gossip {

struct LagBoundConfig {
  int max_lag = 0;  // steps without a completed exchange before training waits; 0: off
  // After this many waits in a row that saw no exchange complete, the lag between waits doubles
  // with each further fruitless wait (at most max_backoff times max_lag), until one completes.
  int fruitless_before_backoff = 3;
  int max_backoff = 64;
};

class LagBound {
 public:
  explicit LagBound(LagBoundConfig cfg);

  // Every step boundary: step, and the count of exchanges that averaged so far. True when
  // training should wait now (then call waited() with the outcome).
  bool should_wait(std::int64_t step, std::uint64_t averaged);
  // The wait ended; completed: an exchange averaged during it. Returns true exactly once per
  // backoff episode, when this wait started it (the caller warns), false otherwise.
  bool waited(bool completed);
  // The steps between waits now: max_lag, or more while backing off.
  std::int64_t lag() const { return lag_; }
  bool backing_off() const { return lag_ > cfg_.max_lag; }
  const LagBoundConfig& config() const { return cfg_; }
  // Returns true once when an exchange completed after a backoff (the caller says so).
  bool take_recovered();

 private:
  void completed(std::int64_t step, std::uint64_t averaged);

  LagBoundConfig cfg_;
  std::int64_t lag_;
  std::uint64_t seen_ = 0;       // completed exchanges, as last seen
  std::int64_t since_step_ = 0;  // the step at which that count last changed (or a wait ended)
  int fruitless_ = 0;            // waits in a row that saw nothing complete
  bool recovered_ = false;
};

}  // namespace gossiptrain::gossip
