// The run's one time axis. A run may take several launches (gossip-launch --resume): run time
// counts the time each launch ran, so a resumed launch goes on where the last one stopped and the
// time the run was down is left out. Every process of a peer is placed on that axis by its
// `clock` line (the wall time of its t = 0), through the launch that was running then.
#pragma once

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::apps {

class RunClock {
 public:
  // A fresh run: this launch starts at run time 0, at wall time unix_now_s.
  explicit RunClock(double unix_now_s) : launches_{{unix_now_s, 0.0}} {}
  // A resumed run: the earlier launches from the `launch` lines of its events.jsonl, and this one
  // starting at the largest of the last line's t and summary_seconds (the last launch's
  // summary.json `seconds`, when it lived to write one).
  RunClock(const std::vector<nlohmann::json>& events, std::optional<double> summary_seconds,
           double unix_now_s);

  double base_s() const { return launches_.back().run_s; }  // run time at this launch's start
  double unix0_s() const { return launches_.back().unix_s; }
  // Run time of a wall time: on the clock of the latest launch started by then (a time before
  // every known launch, as a run from before `launch` lines: on the earliest's, its gap counted).
  double at_unix(double unix_s) const;

 private:
  struct Span {
    double unix_s;  // wall time of the launch's start
    double run_s;   // run time then
  };
  std::vector<Span> launches_;
};

// Where each process of one peer started on the run's clock (its t = 0), from its metrics lines
// as they are read: exact from the process's `clock` line, else estimated from when the launcher
// read each line (an upper bound, off by a poll tick).
class LifeOffsets {
 public:
  // A line of process `life` (PeerStats::life: 0, 1, ...) with its time t, read at run time
  // now_s; exact_s: the run time of the process's t = 0 when the line is its clock line.
  void add(int life, double t, double now_s, std::optional<double> exact_s);
  const std::vector<double>& offsets() const { return offsets_; }

 private:
  std::vector<double> offsets_;
  std::vector<bool> exact_;
};

}  // namespace gossiptrain::apps
