// A networked peer's gossip side: the encrypted TCP transport, membership, the averaging exchange
// and catch-up sharing it through a dispatcher, with their events turned into metric lines.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "apps/common/options.hpp"
#include "core/metrics.hpp"
#include "core/step_hook.hpp"
#include "gossip/exchange/averager.hpp"
#include "gossip/catch_up/catch_up.hpp"
#include "gossip/exchange/comm_state.hpp"
#include "gossip/dispatcher.hpp"
#include "gossip/exchange/exchange_health.hpp"
#include "gossip/exchange/lag_bound.hpp"
#include "gossip/membership/membership.hpp"
#include "gossip/exchange/pace.hpp"
#include "kernels/backend.hpp"
#include "net/tcp_transport.hpp"

namespace gossiptrain::apps {

// The averager's configuration from a peer's flags (gossip-peer and gossip-sim's train workload).
gossip::AveragerConfig averager_config(const PeerConfig& cfg, std::uint64_t fingerprint);
// The encrypted transport's settings from the flags (a gossip node's, and a FedAvg server's or
// client's).
net::TcpTransportConfig transport_config(const PeerConfig& cfg,
                                         std::shared_ptr<const net::Identity> identity,
                                         std::uint64_t fingerprint, std::vector<int> net_cpus);

// The node is the training loop's one step hook: the averager, then the catch-up server (which
// takes the state after any mix applied at the same boundary).
class GossipNode final : private core::StepHook {
 public:
  // Loads (or creates) the identity, network key and allowlist named in cfg and starts listening;
  // throws net::ConfigError for bad files or a listen address that is taken. net_cpus: the cores
  // of the network threads (core::CpuPlan::net; empty: unpinned).
  GossipNode(const PeerConfig& cfg, std::uint64_t fingerprint, kernels::Backend& backend,
             core::Metrics& metrics, std::vector<int> net_cpus = {});
  ~GossipNode();

  const std::string& peer_id() const;
  const std::string& listen_addr() const { return transport_->listen_addr(); }
  // Joins through the seeds (the transport already listens). If every seed refuses this peer in
  // the handshake (MembershipConfig::join_refused_limit), join_refused() says why from then on
  // and *give_up is set, which ends the waits before training and training itself.
  void start(std::atomic<bool>* give_up = nullptr);
  std::optional<std::string> join_refused() const;
  // Leaves the swarm gracefully and stops the transport.
  void stop();
  // Announces a leave and stops answering membership, from any thread, without waiting: the
  // training thread has hung, and the swarm must stop counting on this peer. The transport stays
  // up until stop().
  void withdraw();
  core::StepHook& hook() { return *this; }
  gossip::AveragerStats stats() const { return averager_->stats(); }
  // --max-lag: how often, and for how long in all, training waited for an exchange to complete.
  std::uint64_t lag_waits() const { return lag_waits_; }
  double lag_wait_s() const { return lag_wait_s_; }
  // --max-ahead: how often, and for how long in all, training waited for slower partners.
  std::uint64_t pace_waits() const { return pace_waits_; }
  double pace_wait_s() const { return pace_wait_s_; }

  // Start together: waits (polling membership) until n live members, this peer included, are
  // known, or timeout_s pass (a warning; returns false), or stop is set. Before the first step.
  bool wait_for_members(int n, double timeout_s, const std::atomic<bool>& stop);
  // Catch-up: waits for the join through the seeds, then fetches a live member's state, all within
  // cfg.deadline. nullopt when there was nobody to fetch from (no live member after joining) or
  // stop was set; else the fetch's result (the state in it when ok). Before the first step.
  std::optional<gossip::CatchUpResult> catch_up(gossip::CatchUpClientConfig cfg,
                                                const std::atomic<bool>& stop);

 private:
  // Sizes the received-buffer pool for this model (once the transport exists).
  void limit_buffer_pool(const PeerConfig& cfg);
  void build_protocols(const gossip::MembershipConfig& mc, const gossip::AveragerConfig& ac,
                       kernels::Backend& backend, std::uint64_t fingerprint);
  void between_steps(core::StepContext& ctx) override;
  // Membership has joined (its first sync reply is in); asked on the protocol thread.
  bool joined();
  // Warns once when every exchange has failed for a while (protocol thread).
  void watch_health(const gossip::ExchangeEvent& e);
  // Bounded staleness: after max_lag_ steps without an exchange that averaged, keeps serving the
  // protocol between steps (no training) until one completes or kMaxLagWait passes; backs off
  // when the waits find none (gossip/exchange/lag_bound.hpp).
  void bound_lag(core::StepContext& ctx);
  // --max-ahead: while more than that ahead of the slowest recent partner, serves the protocol
  // between steps (no training), at most kPaceWait at a time.
  void keep_pace(core::StepContext& ctx);
  bool same_run_length(const gossip::ExchangeEvent& e) const;  // protocol thread
  void say_waits(int epoch);  // the `waits` metric line
  // Serves the protocol (no training) until done() or max_s pass; returns the seconds waited.
  template <class Done>
  double serve_until(core::StepContext& ctx, double max_s, Done done);

  core::Metrics& metrics_;
  std::shared_ptr<const net::Identity> identity_;
  std::unique_ptr<net::TcpTransport> transport_;
  gossip::Dispatcher dispatcher_;
  std::unique_ptr<gossip::Membership> membership_;
  std::unique_ptr<gossip::Averager> averager_;
  gossip::ExchangeHealth health_;  // protocol thread only
  std::unique_ptr<gossip::CatchUpServer> catch_up_server_;
  std::unique_ptr<gossip::CatchUpClient> catch_up_client_;
  // The outer optimizer and error feedback's state (null when both are off). Training thread.
  std::unique_ptr<gossip::CommState> comm_;
  std::atomic<bool> started_{false};
  mutable std::mutex refused_mu_;
  std::optional<std::string> join_refused_;  // set on the protocol thread
  std::atomic<bool>* give_up_ = nullptr;
  // Training thread only: --max-lag state.
  int max_lag_ = 0;
  std::unique_ptr<gossip::LagBound> lag_;
  std::uint64_t lag_waits_ = 0;
  double lag_wait_s_ = 0.0;
  int waits_epoch_ = -1;  // the epoch of the last `waits` line
  double hook_s_ = 0.0;   // seconds in the averager's and catch-up's step hooks
  // --max-ahead (null: off). Partners are heard on the protocol thread.
  std::unique_ptr<gossip::PaceKeeper> pace_;
  std::atomic<std::int64_t> total_steps_{0};  // of our run, from the training thread
  std::uint64_t pace_waits_ = 0;
  double pace_wait_s_ = 0.0;
};

}  // namespace gossiptrain::apps
