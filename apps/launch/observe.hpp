// gossip-launch's observability outputs: the prometheus.yml that scrapes every peer, and the
// swarm's model (the average of the peers that finished) exported and evaluated once.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

// A ready Prometheus scrape config for the peers' endpoints (127.0.0.1:base_port + i), one
// target per peer with a `peer` label, scraped every 2 s.
std::string prometheus_config(const std::vector<PeerPlan>& plans, int base_port);

// Averages the final checkpoints of the given peers (one folder each, all of one model) into
// run_dir/swarm/ckpt, then runs `peer_bin --export run_dir/swarm/model.safetensors
// --from-checkpoint ...` with the run's data and backend, which evaluates it on the test set.
// Returns {path, peers, test_acc, test_loss, ...} or {error} when something failed (said too in
// run_dir/swarm/export.log).
nlohmann::json export_swarm_model(const std::string& run_dir, const std::vector<std::string>& ckpts,
                                  const PeerConfig& cfg, const std::string& peer_bin);

}  // namespace gossiptrain::apps
