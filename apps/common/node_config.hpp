// gossip-peer's flags (PeerConfig) as the typed configurations of what it builds: the gossip node
// and the encrypted TCP transport (a gossip node's, a FedAvg server's or client's).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "apps/common/options.hpp"
#include "gossip/exchange/averager.hpp"
#include "gossip/node/node.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::apps {

// The gossip node's configuration: the one the flags filled (PeerConfig::node), with what the
// flags do not hold: the model's fingerprint and the checkpoint folder (gossip-peer,
// the Python binding's peer and gossip-sim's train workload).
gossip::NodeConfig node_config(const PeerConfig& cfg, std::uint64_t fingerprint);
// The encrypted transport's settings from the flags (a gossip node's, and a FedAvg server's or
// client's).
net::TcpTransportConfig transport_config(const PeerConfig& cfg,
                                         std::shared_ptr<const net::Identity> identity,
                                         std::uint64_t fingerprint, std::vector<int> net_cpus);

}  // namespace gossiptrain::apps
