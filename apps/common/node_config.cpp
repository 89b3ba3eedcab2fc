// From gossip-peer's flags to the typed configurations of the transport and the gossip node.
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

gossip::NodeConfig node_config(const PeerConfig& cfg, std::uint64_t fingerprint) {
  gossip::NodeConfig nc = cfg.node;
  nc.fingerprint = fingerprint;
  nc.averager.fingerprint = fingerprint;
  nc.checkpoint_dir = cfg.train.checkpoint_dir;
  if (nc.averager.fault.mode != gossip::FaultMode::None)
    spdlog::warn("FAULTY PEER (--fault {}): sending corrupted vectors, mixing nothing in",
                 cfg.fault_spec);
  return nc;
}

}  // namespace gossiptrain::apps
