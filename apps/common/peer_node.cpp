// Builds gossip-peer's encrypted TCP transport from its flags and runs a gossip::Node over it.
#include "apps/common/peer_node.hpp"

#include <algorithm>

#include "apps/common/node_config.hpp"
#include "core/model.hpp"
#include "net/buffer_pool.hpp"
#include "net/secure/identity.hpp"

namespace gossiptrain::apps {

// The received-buffer pool holds what one exchange needs again (the partner's vector as fp32,
// the largest wire, twice for a catch-up served meanwhile), not the 256 MiB default: a hundred
// peers of a small model on one machine must not each keep a large pool.
void PeerNode::limit_buffer_pool(std::size_t n_params) {
  transport_->buffers().set_limit(std::max<std::size_t>(8u << 20, 2 * 4 * n_params + (2u << 20)));
}

PeerNode::PeerNode(const PeerConfig& cfg, const core::Model& model, kernels::Backend& backend,
                   core::Metrics& metrics, std::vector<int> net_cpus)
    : PeerNode(cfg, model.fingerprint(), model.num_params(), backend, metrics,
               std::move(net_cpus)) {}

PeerNode::PeerNode(const PeerConfig& cfg, std::uint64_t fingerprint, std::size_t n_params,
                   kernels::Backend& backend, core::Metrics& metrics, std::vector<int> net_cpus) {
  identity_ = std::make_shared<const net::Identity>(net::Identity::load_or_create(cfg.identity));
  net::TcpTransportConfig tc = transport_config(cfg, identity_, fingerprint, std::move(net_cpus));
  // Another live peer with our key (the transport has logged the fix): a metric line too.
  tc.on_shared_identity = [&metrics, file = tc.identity_file](const std::string& addr) {
    metrics.emit("identity_clash", {{"addr", addr}, {"identity", file}});
  };
  transport_ = std::make_unique<net::TcpTransport>(std::move(tc));
  limit_buffer_pool(n_params);
  node_ = std::make_unique<gossip::Node>(*transport_, node_config(cfg, fingerprint), backend,
                                         metrics, [this] { transport_->start(); });
}

PeerNode::~PeerNode() { stop(); }

const std::string& PeerNode::peer_id() const { return identity_->peer_id(); }

void PeerNode::stop() {
  if (stopped_) return;
  stopped_ = true;
  node_->leave();
  transport_->stop();
}

}  // namespace gossiptrain::apps
