// --max-lag's policy (gossip/node/node.cpp runs the waits): when training should stop to wait for
// an averaging exchange, the time budget that keeps those waits a bounded share of training, and
// the backoff that stops it waiting for exchanges that cannot succeed. Pure bookkeeping on step
// counts and a training clock the caller passes in, no network, so tests drive it step by step.
#pragma once

#include <cstdint>
#include <string>

namespace gossiptrain::gossip {

// --max-lag as given: auto, off, or a number of steps. resolve() is the one place auto is decided.
class MaxLag {
 public:
  enum class Mode { Auto, Off, Steps };
  MaxLag() = default;  // auto
  static MaxLag off() { return MaxLag(Mode::Off, 0); }
  static MaxLag steps(int n);  // n >= 1; std::invalid_argument otherwise
  Mode mode() const { return mode_; }
  int steps() const { return steps_; }  // the number given (Steps); 0 otherwise
  // The steps between waits (0: off) for this --gossip-every on this backend. auto: one exchange
  // per gossip_every steps on a GPU, whose steps outrun any exchange (8 peers on one H100, 10
  // epochs: 86.51% mean with 4 x, 87.64% with 1 x); 4 x on the CPU (host_memory), where exchanges
  // keep up and a tighter bound would only make peers wait for each other.
  int resolve(int gossip_every, bool host_memory) const;
  bool operator==(const MaxLag&) const = default;

 private:
  MaxLag(Mode m, int n) : mode_(m), steps_(n) {}
  Mode mode_ = Mode::Auto;
  int steps_ = 0;
};
// The flag's spelling: "auto", "off" or the number.
std::string to_string(const MaxLag& m);

struct LagBoundConfig {
  int max_lag = 0;  // steps without a completed exchange before training waits; 0: off
  // After this many waits in a row that saw no exchange complete, the lag between waits doubles
  // with each further fruitless wait (at most max_backoff times max_lag), until one completes.
  int fruitless_before_backoff = 3;
  int max_backoff = 64;
  // Time budget: training waits at most `share` seconds for each second it trained (a token
  // bucket that fills at `share` per training second, holds at most burst_s, and must be above 0
  // for a wait to start; a wait's length is taken from it afterwards, so it may go below). Where
  // an exchange takes longer than max_lag steps, the bound then waits every so many more steps
  // that it costs at most 1 / (1 + share) of the peer's throughput. 0: no budget (steps only).
  double share = 0.25;
  double burst_s = 0.5;
};

class LagBound {
 public:
  explicit LagBound(LagBoundConfig cfg);

  // Every step boundary: step, the count of exchanges that averaged so far, and the seconds this
  // peer has trained (its clock without the time it waited, here or elsewhere). True when
  // training should wait now (then call waited() with the outcome).
  bool should_wait(std::int64_t step, std::uint64_t averaged, double train_s);
  // The wait ended after wait_s seconds; completed: an exchange averaged during it. Returns true
  // exactly once per backoff episode, when this wait started it (the caller warns), false
  // otherwise.
  bool waited(bool completed, double wait_s);
  // The steps between waits now: max_lag, or more while backing off.
  std::int64_t lag() const { return lag_; }
  bool backing_off() const { return lag_ > cfg_.max_lag; }
  const LagBoundConfig& config() const { return cfg_; }
  // Returns true once when an exchange completed after a backoff (the caller says so).
  bool take_recovered();
  // Waits due by steps that the time budget put off (each step boundary counts once).
  std::uint64_t deferred() const { return deferred_; }
  // Returns true once, the first time the budget puts a wait off (the caller says so).
  bool take_first_deferral();

 private:
  void completed(std::int64_t step, std::uint64_t averaged);

  LagBoundConfig cfg_;
  std::int64_t lag_;
  std::uint64_t seen_ = 0;       // completed exchanges, as last seen
  std::int64_t since_step_ = 0;  // the step at which that count last changed (or a wait ended)
  int fruitless_ = 0;            // waits in a row that saw nothing complete
  bool recovered_ = false;
  double tokens_s_;              // the time budget's bucket (seconds of waiting)
  double train_s_ = -1;          // the training clock as last seen (-1: not yet)
  std::uint64_t deferred_ = 0;
  bool first_deferral_ = false;
};

}  // namespace gossiptrain::gossip
