// A networked peer's gossip side: the encrypted TCP transport, membership and the averaging
// exchange sharing it through a dispatcher, with their events turned into metric lines.
#pragma once

#include <memory>

#include "apps/common_options.hpp"
#include "core/metrics.hpp"
#include "core/step_hook.hpp"
#include "gossip/averager.hpp"
#include "gossip/dispatcher.hpp"
#include "gossip/exchange_health.hpp"
#include "gossip/membership.hpp"
#include "kernels/backend.hpp"
#include "net/tcp_transport.hpp"

namespace gossiptrain::apps {

class GossipNode {
 public:
  // Loads (or creates) the identity, network key and allowlist named in cfg and starts listening;
  // throws net::ConfigError for bad files or a listen address that is taken.
  GossipNode(const PeerConfig& cfg, std::uint64_t fingerprint, kernels::Backend& backend,
             core::Metrics& metrics);
  ~GossipNode();

  const std::string& peer_id() const;
  const std::string& listen_addr() const { return transport_->listen_addr(); }
  // Joins through the seeds (the transport already listens).
  void start();
  // Leaves the swarm gracefully and stops the transport.
  void stop();
  core::StepHook& hook() { return *averager_; }
  gossip::AveragerStats stats() const { return averager_->stats(); }

 private:
  void build_protocols(const gossip::MembershipConfig& mc, const gossip::AveragerConfig& ac,
                       kernels::Backend& backend);
  // Warns once when every exchange has failed for a while (protocol thread).
  void watch_health(const gossip::ExchangeEvent& e);

  core::Metrics& metrics_;
  std::shared_ptr<const net::Identity> identity_;
  std::unique_ptr<net::TcpTransport> transport_;
  gossip::Dispatcher dispatcher_;
  std::unique_ptr<gossip::Membership> membership_;
  std::unique_ptr<gossip::Averager> averager_;
  gossip::ExchangeHealth health_;  // protocol thread only
  bool started_ = false;
};

}  // namespace gossiptrain::apps
