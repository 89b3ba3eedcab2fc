// Builds gossip-peer's encrypted TCP transport from its flags and runs a gossip::Node over it.
#include "apps/common/peer_node.hpp"

#include <algorithm>
#include <stdexcept>

#include "apps/common/node_config.hpp"
#include "core/model.hpp"
#include "net/buffer_pool.hpp"
#include "net/identity.hpp"

namespace gossiptrain::apps {

// The received-buffer pool holds what one exchange needs again (the partner's vector as fp32,
// the largest wire, twice for a catch-up served meanwhile), not the 256 MiB default: a hundred
// peers of a small model on one machine must not each keep a large pool.
void PeerNode::limit_buffer_pool(const PeerConfig& cfg) {
  std::size_t n_params = 0;
  try {
    const std::vector<int> d = core::parse_model_spec(cfg.train.model);
    for (std::size_t i = 1; i < d.size(); ++i)
      n_params += std::size_t(d[i - 1]) * std::size_t(d[i]) + std::size_t(d[i]);
  } catch (const std::invalid_argument&) {
    n_params = 0;  // the trainer reports a bad spec; keep the default pool
  }
  if (n_params > 0)
    transport_->buffers().set_limit(std::max<std::size_t>(8u << 20, 2 * 4 * n_params + (2u << 20)));
}

PeerNode::PeerNode(const PeerConfig& cfg, std::uint64_t fingerprint, kernels::Backend& backend,
                   core::Metrics& metrics, std::vector<int> net_cpus) {
  identity_ = std::make_shared<const net::Identity>(net::Identity::load_or_create(cfg.identity));
  transport_ = std::make_unique<net::TcpTransport>(
      transport_config(cfg, identity_, fingerprint, std::move(net_cpus)));
  limit_buffer_pool(cfg);
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
