// From gossip-peer's flags to the typed configurations of the transport, the averager and the
// gossip node.
#include "apps/common/node_config.hpp"

#include <filesystem>

#include <spdlog/spdlog.h>

#include "net/secure/identity.hpp"

namespace gossiptrain::apps {

net::TcpTransportConfig transport_config(const PeerConfig& cfg,
                                         std::shared_ptr<const net::Identity> identity,
                                         std::uint64_t fingerprint, std::vector<int> net_cpus) {
  net::TcpTransportConfig tc;
  tc.listen = cfg.listen;
  tc.advertise = cfg.advertise;
  tc.nat.reachability_check = true;  // docs/nat.md
  tc.identity = std::move(identity);
  std::error_code ec;  // the absolute path, as two peers started in one folder share it
  const auto abs = std::filesystem::absolute(cfg.identity, ec);
  tc.identity_file = ec ? cfg.identity : abs.lexically_normal().string();
  if (!cfg.network_key.empty()) tc.network_key = net::load_network_key(cfg.network_key);
  if (!cfg.allowlist.empty()) tc.allowlist = net::Allowlist::load(cfg.allowlist);
  tc.model_fingerprint = fingerprint;
  tc.thread_nice = cfg.net_nice;
  tc.thread_cpus = std::move(net_cpus);
  if (cfg.crypto_threads >= 0) tc.crypto_threads = unsigned(cfg.crypto_threads);
  // A failed handshake is logged once, by the transport ("net: handshake with ... failed").
  return tc;
}

gossip::AveragerConfig averager_config(const PeerConfig& cfg, std::uint64_t fingerprint) {
  gossip::AveragerConfig ac;
  ac.gossip_every = cfg.gossip_every;
  ac.wire = cfg.wire;
  ac.error_feedback = cfg.error_feedback;
  ac.finish_wire = cfg.finish_wire;
  ac.finish_from = cfg.finish_from;
  ac.slow_link_wire = cfg.slow_link_wire;
  ac.weight_by_samples = cfg.weight_by_samples;
  ac.fingerprint = fingerprint;
  ac.max_diff_norm = cfg.max_diff_norm;
  ac.settle_distance = cfg.linger_settle;
  ac.robust = cfg.robust;
  ac.choice = cfg.partner_choice;
  ac.fault = cfg.fault;
  if (cfg.fault.mode != gossip::FaultMode::None)
    spdlog::warn("FAULTY PEER (--fault {}): sending corrupted vectors, mixing nothing in",
                 cfg.fault_spec);
  ac.max_rate_bytes_per_s = cfg.max_rate_mb * 1e6;
  return ac;
}

gossip::NodeConfig node_config(const PeerConfig& cfg, std::uint64_t fingerprint) {
  gossip::NodeConfig nc;
  nc.fingerprint = fingerprint;
  nc.membership.seeds = cfg.seeds;
  nc.averager = averager_config(cfg, fingerprint);
  nc.max_lag = cfg.max_lag;
  nc.max_lag_share = cfg.max_lag_share;
  nc.max_ahead = cfg.max_ahead;
  nc.outer = gossip::OuterConfig{cfg.outer_every, float(cfg.outer_lr), float(cfg.outer_momentum)};
  nc.checkpoint_dir = cfg.train.checkpoint_dir;
  return nc;
}

}  // namespace gossiptrain::apps
