// NatTraversal: the channel events the transport hands it, stop and the statistics. The dial-backs
// (with the transport messages) are in dial_back.cpp, the relays (with accepted sockets) in
// relay.cpp.
#include "net/nat/nat_traversal.hpp"

namespace gossiptrain::net {

NatTraversal::NatTraversal(NatHost& host, asio::io_context& io, const NatConfig& config,
                           const Limits& limits)
    : host_(host), io_(io), config_(config), limits_(limits) {}

NatTraversal::~NatTraversal() = default;

void NatTraversal::on_closed(const std::shared_ptr<Channel>& ch, const CloseCause& cause) {
  if (ch->relayed()) relayed_closed(ch, cause);
}

void NatTraversal::on_gone(const std::shared_ptr<Channel>& ch, const CloseCause& cause) {
  if (ch->relayed() && !ch->established()) relayed_closed(ch, cause);
  relay_of_.erase(ch.get());
}

void NatTraversal::stop(bool cancel_pending) {
  close_splices();
  if (!cancel_pending) return;
  pending_reverse_.clear();
  pending_relay_.clear();
}

NatStats NatTraversal::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

}  // namespace gossiptrain::net
