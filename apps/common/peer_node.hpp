// A networked peer's gossip side: the encrypted TCP transport of gossip-peer's flags (identity,
// network key, allowlist, listen and advertised addresses, network threads) and the gossip::Node
// (gossip/node) that runs membership, the averaging exchange and catch-up over it.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
#include "core/step_hook.hpp"
#include "gossip/node/node.hpp"
#include "kernels/backend.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::apps {

class PeerNode {
 public:
  // Loads (or creates) the identity, network key and allowlist named in cfg and starts listening;
  // throws net::ConfigError for bad files or a listen address that is taken. model: the trainer's
  // (its fingerprint goes into the handshake, its parameter count sizes the buffer pool).
  // net_cpus: the cores of the network threads (core::CpuPlan::net; empty: unpinned).
  PeerNode(const PeerConfig& cfg, const core::Model& model, kernels::Backend& backend,
           core::Metrics& metrics, std::vector<int> net_cpus = {});
  // A vector of n_params values that is no model of ours (the Python binding's buffer), known to
  // the handshake by fingerprint.
  PeerNode(const PeerConfig& cfg, std::uint64_t fingerprint, std::size_t n_params,
           kernels::Backend& backend, core::Metrics& metrics, std::vector<int> net_cpus = {});
  ~PeerNode();

  const std::string& peer_id() const;
  const std::string& listen_addr() const { return transport_->listen_addr(); }
  // The gossip side: start (join), the step hook, catch-up, waits and stats (gossip/node/node.hpp).
  gossip::Node& gossip() { return *node_; }
  // The transport (tests read its buffer pool's limit).
  net::TcpTransport& transport() { return *transport_; }
  // Leaves the swarm gracefully and stops the transport.
  void stop();

 private:
  // Sizes the received-buffer pool for a model of n_params (once the transport exists).
  void limit_buffer_pool(std::size_t n_params);

  std::shared_ptr<const net::Identity> identity_;
  std::unique_ptr<net::TcpTransport> transport_;
  std::unique_ptr<gossip::Node> node_;  // declared after the transport: destroyed before it
  bool stopped_ = false;
};

}  // namespace gossiptrain::apps
