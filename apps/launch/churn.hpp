// gossip-launch --churn: when each event of a churn scenario (core/churn_scenario) is due, and the
// run's events.jsonl. The launcher applies the events to its peers (signals, respawns, network
// rules); this module only decides what is due, including the end of an effect given with "for"
// (a pause's resume, a partition's heal, a link restored), which it times from the moment the
// effect actually began.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/churn/scenario.hpp"

namespace gossiptrain::apps {

class ChurnDriver {
 public:
  // horizon_s bounds the random model's schedule (the launcher stops asking once training is over).
  ChurnDriver(core::ChurnScenario scenario, double horizon_s);

  // The events due at launch time now_s with the swarm at mean progress (fraction of steps done,
  // 0..1), in order: timed and end-of-effect events by time, then progress events. Each event's
  // `at` is rewritten to now_s (when it is applied). Events with "for" schedule their end.
  std::vector<core::ChurnEvent> due(double now_s, double progress);
  // True while an event that starts or wakes a process (restart, join, resume) is still to come.
  bool start_pending() const;
  bool empty() const;
  const core::ChurnScenario& scenario() const { return scenario_; }
  int total_peers() const { return core::total_peers(scenario_); }

 private:
  void schedule_end(const core::ChurnEvent& e, double now_s);

  core::ChurnScenario scenario_;
  std::vector<core::ChurnEvent> timed_;        // sorted by at; consumed from next_timed_
  std::vector<core::ChurnEvent> by_progress_;  // sorted by at; consumed from next_progress_
  std::size_t next_timed_ = 0;
  std::size_t next_progress_ = 0;
  std::vector<core::ChurnEvent> ends_;  // end-of-effect events, unsorted (few)
};

// events.jsonl in the run folder: one JSON object per line, each with "t" (seconds since launch)
// and "event"; flushed per line so that a killed launcher leaves every line it wrote.
class EventLog {
 public:
  EventLog() = default;
  explicit EventLog(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  void write(double t, const std::string& event, nlohmann::json fields = nlohmann::json::object());
  const std::vector<nlohmann::json>& lines() const { return lines_; }

 private:
  std::FILE* f_ = nullptr;
  std::vector<nlohmann::json> lines_;
};

// What the churn runner may do to the launcher's peer processes (slot i = peer index).
class ChurnPeers {
 public:
  virtual ~ChurnPeers() = default;
  virtual bool running(int i) const = 0;
  virtual void send_signal(int i, int sig) = 0;
  // Starts slot i's process with its plan: the same identity, shard and checkpoint folder, so a
  // restarted peer resumes and a joined peer (never started before) starts fresh.
  virtual void start_peer(int i) = 0;
  // Network faults (--netns only; the options refuse these events without it). A link event sets
  // the link's whole state: what it does not give (rate or loss) is removed.
  virtual void partition(const std::vector<std::vector<int>>& groups) = 0;
  virtual void heal() = 0;
  virtual void set_link(int i, std::optional<double> rate_mbit, std::optional<double> loss) = 0;
  // Slot i runs with `gossip-peer --fault mode` from its next start on ("" = honest again).
  virtual void set_fault(int i, const std::string& mode) = 0;
};

// Where each peer slot stands as far as churn is concerned.
enum class SlotState { NotJoined, Up, Paused, Crashed, Stopped };
const char* slot_state_name(SlotState s);

// Applies a scenario to the launcher's peers: the due events each tick, and the bookkeeping that
// tells a crash the scenario caused from a peer that failed on its own.
class ChurnRunner {
 public:
  ChurnRunner(core::ChurnScenario scenario, double horizon_s, EventLog& log);

  // Applies every event due at now_s (launch time) with the swarm at mean progress.
  void tick(double now_s, double progress, ChurnPeers& peers);
  void started(int i) { state_.at(std::size_t(i)) = SlotState::Up; }
  // A peer process ended; true when the scenario caused it (a crash or stop it sent), so the
  // launcher does not count it as a failure.
  bool exited(int i);
  SlotState state(int i) const { return state_.at(std::size_t(i)); }
  // Paused peers with no resume to come, once no other peer is up, are resumed (SIGCONT) so the
  // run can end: a scenario that pauses without "for" or "resume" would otherwise hang it.
  void release_paused(double now_s, ChurnPeers& peers);
  // Whether the launcher should go on although no peer runs: a crashed or stopped peer is still
  // to be restarted.
  bool waiting_for_restart() const;
  int restarts(int i) const { return restarts_.at(std::size_t(i)); }
  int slots() const { return int(state_.size()); }

 private:
  // What one event did to each peer it names: applied, deferred (a restart of a peer whose
  // killed process is not reaped yet) or skipped, with why (events.jsonl's churn line).
  struct Outcome {
    nlohmann::json done = nlohmann::json::array();
    nlohmann::json deferred = nlohmann::json::array();
    nlohmann::json skipped = nlohmann::json::array();
    nlohmann::json why = nlohmann::json::object();  // peer -> reason
    void skip(int p, const std::string& reason) {
      skipped.push_back(p);
      why[std::to_string(p)] = reason;
    }
  };
  void apply(const core::ChurnEvent& e, double now_s, ChurnPeers& peers);
  void restart(int p, ChurnPeers& peers, Outcome& o);
  void run_deferred_restarts(double now_s, ChurnPeers& peers);
  std::string skip_reason(int p, const ChurnPeers& peers) const;
  // Sends `sig` to each of e's peers that runs in state `required`, moves it to `to` and calls
  // then(p); the others are skipped.
  void signal_each(const core::ChurnEvent& e, int sig, SlotState required, SlotState to,
                   ChurnPeers& peers, Outcome& o, const std::function<void(int)>& then = {});

  ChurnDriver driver_;
  EventLog& log_;
  std::vector<SlotState> state_;
  std::vector<bool> churn_signalled_;
  std::vector<int> restarts_;
  std::vector<int> deferred_restarts_;  // restarts due while the killed process was not reaped
  int next_join_;
};

// A peer's metrics line worth a line of events.jsonl, as (event, fields): membership changes
// (with the member's peer index when index_of knows its id), evaluations and catch-ups; nothing
// for the other lines, which are not parsed.
std::optional<std::pair<std::string, nlohmann::json>> observed_line(
    std::size_t peer, const std::string& line,
    const std::function<std::optional<std::size_t>(const std::string&)>& index_of);

// summary.json's "churn" section, from the lines of events.jsonl alone: per crash or stop, who
// noticed it and when (the detection time), the accuracy and consensus distance just before and
// after, and the time for the swarm's mean accuracy to recover; per join, the joiner's first
// evaluation against the swarm's; for the run, peers alive over time and counts per kind.
// The detection bound is membership's longest suspicion timeout plus a probe period, for the
// initial swarm size (gossip::MembershipConfig defaults).
nlohmann::json churn_report(const std::vector<nlohmann::json>& events,
                            const core::ChurnScenario& scenario, const std::string& churn_arg);
double detection_bound_s(int peers);

// One line for the user of a `churn` line of events.jsonl, as it happens ("churn at 12.3 s: crash
// peer 2", with the peers deferred or skipped and why); empty for any other line.
std::string describe_churn(const nlohmann::json& event);

}  // namespace gossiptrain::apps
