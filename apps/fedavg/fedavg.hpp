// FedAvg (McMahan et al. 2017) with a server, spoken over any net::Transport: gossip-peer
// --fedavg-server runs the server, --fedavg-server-addr HOST:PORT a client, each over the
// encrypted TCP transport it builds; tests run both over the seeded in-memory network.
// Options: FedProx's proximal term (Li et al. 2020) and server momentum (FedAvgM, Hsu et al. 2019).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "apps/common/options.hpp"
#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "kernels/backend.hpp"
#include "net/transport.hpp"

namespace gossiptrain::apps::fedavg {

// The server: waits for --min-clients, then runs rounds until --rounds are done (resuming from
// its checkpoint in --checkpoint-dir), and tells the clients to exit. data.test is the test set
// the global model is evaluated on each round.
//
// Its life, which the program drives: construct it (the model, and the global model from its
// checkpoint: core::CheckpointError when it is another model's); build a transport for its
// fingerprint() and num_params() (fedavg::max_message_bytes); attach() it before that transport
// starts; run(); stop the transport before this server is destroyed (it is the handler).
class Server {
 public:
  Server(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
         core::Metrics& metrics, const std::atomic<bool>& stop);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint64_t fingerprint() const;  // the model's, for the handshake
  std::size_t num_params() const;
  // Speaks over transport from now on: its handler. Once, before it starts.
  void attach(net::Transport& transport);
  // The exit code: 0 when every round is done, 130 when stopped, 1 when no client came.
  int run();
  // The global model after the rounds applied so far.
  const std::vector<float>& global_model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client: connects to the server (and again after losing it, for --fedavg-wait), trains each
// task on its shard and sends its model back, until the server says the run is done. The same
// life as the server's: construct, a transport for fingerprint() and num_params(), attach(),
// run(), stop the transport before the client goes.
class Client {
 public:
  Client(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
         core::Metrics& metrics, const std::atomic<bool>& stop);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::uint64_t fingerprint() const;
  std::size_t num_params() const;
  void attach(net::Transport& transport);
  // The exit code: 0 when the server said it is done, 1 when it stayed away past --fedavg-wait,
  // 130 when stopped.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gossiptrain::apps::fedavg
