// FedAvg (McMahan et al. 2017) with a server, over the same encrypted, authenticated channel as
// gossip: gossip-peer --fedavg-server runs the server, --fedavg-server-addr HOST:PORT a client.
// Options: FedProx's proximal term (Li et al. 2020) and server momentum (FedAvgM, Hsu et al. 2019).
#pragma once

#include <atomic>
#include <vector>

#include "apps/common/options.hpp"
#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::apps {

// The server: waits for --min-clients, then runs rounds until --rounds are done (resuming from
// its checkpoint in --checkpoint-dir), and tells the clients to exit. Returns the exit code.
// data.test is the test set the global model is evaluated on each round.
int run_fedavg_server(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
                      core::Metrics& metrics, const std::atomic<bool>& stop);
// A client: connects to the server (and again after losing it, for --fedavg-wait), trains each
// task on its shard and sends its model back, until the server says the run is done.
int run_fedavg_client(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
                      core::Metrics& metrics, const std::atomic<bool>& stop);

}  // namespace gossiptrain::apps
