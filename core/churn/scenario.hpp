// Churn scenarios (issue 10): scheduled faults that gossip-launch --churn runs against real peer
// processes and that a simulator can replay. This module parses and validates the JSON format (or
// a command-line shorthand) and expands its "random" model into concrete timed events. It runs
// nothing itself.
//
// The file format is a contract: later versions extend it, never rename.
//   {"seed": 7,
//    "events": [
//      {"at": 20, "event": "crash", "peers": [3]},
//      {"at_progress": 0.5, "event": "join", "count": 1},
//      {"at": 30, "event": "partition", "groups": [[0,1,2,3], [4,5,6,7]], "for": 20}],
//    "random": {"kind": "crash", "mean_uptime_s": 30, "mean_downtime_s": 5,
//               "distribution": "exponential", "restart": true, "max_down_fraction": 0.5}}
//
// Top level: "seed" (integer >= 0, default 0), "events" (array), "random" (object); at least one
// of events/random. Every event has "event" and exactly one of "at" (seconds since launch, >= 0)
// or "at_progress" (the swarm's mean fraction of steps done, in [0,1]). Per kind:
//   restart, resume: "peers"                        crash, stop, pause: "peers", optional "for"
//   join: optional "count" (integer >= 1, default 1) heal: nothing
//   partition: "groups" (>= 2 disjoint non-empty lists of peers), optional "for"
//   link: "peers", "rate_mbit" (> 0) and/or "loss" (in [0,1)), optional "for"
//   fault: "peers", "mode" (scale:K, random, signflip, stale or nan), optional "for" (gossip-peer
//          --fault MODE for that long)
// "for" is seconds (> 0) after which the effect ends (restart, resume, heal, link or fault
// restored).
// "peers" are non-empty lists of distinct indices: 0..N-1 are the initial N peers and joined peers
// take the next indices in the order they join. Which peers a partition's groups leave out is for
// the executor to decide. Unknown keys anywhere are refused, so a typo never silently does nothing.
//
// "random": each churned peer alternates up and down durations drawn with the given means.
//   "kind": crash | stop | pause (how a peer goes down)        required
//   "mean_uptime_s", "mean_downtime_s": > 0                    required
//   "distribution": "exponential" (default) or "weibull:K" (K > 0, scale set so the mean holds)
//   "restart": bool, default true; false = crashed/stopped peers stay down (not allowed for pause)
//   "max_down_fraction": in (0,1], default 0.5; at most floor(fraction * N) churned peers are down
//       at once. A peer whose uptime ends while that many are down stays up and draws a fresh
//       uptime (the down-draw is skipped, not postponed).
//   "peers": which initial peers churn (default all 0..N-1); explicit crash/stop/restart/pause/
//       resume events may not name them (the two would fight over the same process)
//   "start_s": >= 0, default 0; every churned peer is up then and first goes down one uptime later.
//
// Shorthand (--churn without a file; kChurnShorthandHelp is the user-facing text): comma-separated
// items, turned into the JSON above and then parsed and checked the same way.
//   random:KIND            the random model, KIND = crash | stop | pause (at most one), then its
//                          options: uptime=S downtime=S (required), dist=exponential|weibull:K,
//                          restart=0|1, max_down=F, start=S, peers=I+J+...
//   seed=N                 the scenario's seed (anywhere)
//   EVENT:I+J@WHEN         EVENT = crash | stop | restart | pause | resume, for peers I, J, ...
//   join:COUNT@WHEN        COUNT new peers
//   WHEN                   seconds since launch ("20") or percent of training done ("50%");
//                          crash, stop and pause take WHEN/FOR (the event's "for")
// e.g. random:crash,uptime=30,downtime=5,dist=weibull:0.6,seed=3 or crash:3@20,restart:3@35.
// Partition, heal, link and fault events need a file.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::core {

// Every parse/validation failure. The message starts with "churn scenario: " and names the event
// (index in "events", from 0, and kind) and the field, e.g.
//   churn scenario: event 3 (partition): "groups" must be disjoint: peer 2 is in two groups
struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ChurnKind { Crash, Stop, Restart, Join, Pause, Resume, Partition, Heal, Link, Fault };

// The format's name of a kind ("crash", ...), and back (nullopt if unknown).
std::string_view churn_kind_name(ChurnKind kind);
std::optional<ChurnKind> churn_kind_from_name(std::string_view name);

struct ChurnEvent {
  ChurnKind kind = ChurnKind::Crash;
  bool by_progress = false;  // true: "at" is "at_progress" (fraction of steps), false: seconds
  double at = 0.0;
  std::vector<int> peers;                // crash stop restart pause resume link fault
  int count = 1;                         // join
  std::vector<std::vector<int>> groups;  // partition
  std::optional<double> for_s;           // pause partition link fault
  std::optional<double> rate_mbit;       // link
  std::optional<double> loss;            // link
  std::string mode;                      // fault
  bool generated = false;                // made by expand_schedule from "random" (not in to_json)
};

struct RandomChurn {
  ChurnKind down = ChurnKind::Crash;  // Crash, Stop or Pause
  double mean_uptime_s = 0.0;
  double mean_downtime_s = 0.0;
  double weibull_k = 0.0;  // 0: exponential
  bool restart = true;
  double max_down_fraction = 0.5;
  std::vector<int> peers;  // resolved: never empty after parsing
  double start_s = 0.0;
};

struct ChurnScenario {
  std::uint64_t seed = 0;
  int initial_peers = 0;           // N, as given to the parser
  std::vector<ChurnEvent> events;  // as in the file, in file order
  std::optional<RandomChurn> random;
};

// Parses and validates a scenario for a swarm that starts with initial_peers (>= 1) peers.
// Throws ScenarioError.
ChurnScenario parse_churn_scenario(const nlohmann::json& j, int initial_peers);

// Shorthand (see kChurnShorthandHelp) to the JSON format; throws ScenarioError on bad syntax.
// The result still goes through parse_churn_scenario, which checks the values.
nlohmann::json churn_shorthand_to_json(std::string_view shorthand);

// A shorthand when the argument starts with a shorthand item ("random:", "crash:", ... or an
// option such as "seed="), else the path of a JSON file. Throws ScenarioError (also for
// unreadable files); its message then names the file or the shorthand after the prefix.
ChurnScenario load_churn_scenario(const std::string& file_or_shorthand, int initial_peers);

// Help text for --churn, listing both forms and the shorthand grammar.
extern const char* const kChurnShorthandHelp;

// The concrete schedule of a run expected to last horizon_s seconds: the explicit timed events
// plus the "random" model's events in [start_s, horizon_s), sorted by time (stable: ties keep
// explicit events first, in file order); progress events apart, sorted by progress. Deterministic
// in the seed (own inverse-CDF sampling on base::Xoshiro256, the same on every platform). "for" is
// left on its event: the executor schedules the end of the effect.
struct ChurnSchedule {
  std::vector<ChurnEvent> timed;
  std::vector<ChurnEvent> by_progress;
};
ChurnSchedule expand_schedule(const ChurnScenario& s, double horizon_s);

// One event in the file format ("at" or "at_progress", "event", its fields), e.g. for
// events.jsonl; parse_churn_scenario reads it back to the same event.
nlohmann::json to_json(const ChurnEvent& e);

// True if the scenario partitions or shapes links (needs --netns and root).
bool needs_network_control(const ChurnScenario& s);

// Initial peers plus every joined peer: the number of peer slots a run needs.
int total_peers(const ChurnScenario& s);

}  // namespace gossiptrain::core
