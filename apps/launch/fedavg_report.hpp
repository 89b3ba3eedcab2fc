// gossip-launch's figures that put FedAvg and gossip runs on equal terms (issue 33): who is a
// peer (a FedAvg server is not), rounds or exchanges to the target, and how long a crashed FedAvg
// server left the run without progress.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/options.hpp"
#include "apps/launch/metrics.hpp"
#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

// A FedAvg run's progress (0..1): the server's rounds done of --rounds.
double fedavg_progress(const PeerStats& server, const PeerConfig& server_config);

// Adds to summary.json (make_summary's object) what compares modes: each peer's "role" (server,
// client or peer); "num_peers" counts the peers that train (a FedAvg server does not) and
// "num_servers" the servers; "rounds_to_target" (FedAvg: the server's round that first reached
// --target-acc), "epochs_to_target" (the largest of the peers' epochs at their target; FedAvg:
// rounds x --local-epochs) and "exchanges_to_target" (gossip: the exchanges the peers initiated
// until each reached the target, each exchange counted once; null unless every peer reached it).
void add_target_figures(nlohmann::json& summary, LaunchMode mode, int local_epochs,
                        const std::vector<PeerStats>& stats);

// summary.json's "fedavg" section, from events.jsonl: the server's rounds over launch time and,
// per time the server went down (a churn crash or stop, or an exit of its own), when it came back,
// the last round completed before and the first after, and "no_progress_s": how long no round
// completed (from the last round before it went down to the first after its restart; to the end
// of the run if it never came back).
nlohmann::json fedavg_report(const std::vector<nlohmann::json>& events, double run_seconds);

// One line per server outage for the user ("server down at 40.1 s for 20.2 s: no round completed
// for 31.5 s (round 4 -> 5, resumed at round 4)"); empty when there was none.
std::vector<std::string> describe_fedavg_outages(const nlohmann::json& report);

// --compare's "to target" cell: "R rounds" (FedAvg) or "X exch" (gossip), "-" when not reached.
std::string to_target_cell(const nlohmann::json& summary);
// --compare's "peers" cell: "N" or "N + server".
std::string peers_cell(const nlohmann::json& summary);

}  // namespace gossiptrain::apps
