// Routing of transport events between the protocols that share one connection per peer.
#include "gossip/dispatcher.hpp"

#include <algorithm>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::gossip {

void Dispatcher::add(std::uint8_t first_type, std::uint8_t last_type, net::TransportHandler* h) {
  if (!h) throw std::invalid_argument("Dispatcher::add: null handler");
  if (first_type > last_type) throw std::invalid_argument("Dispatcher::add: empty type range");
  for (const auto& r : routes_) {
    if (first_type <= r.last && r.first <= last_type) {
      throw std::invalid_argument("Dispatcher::add: type range overlaps an existing one");
    }
  }
  routes_.push_back({first_type, last_type, h});
  if (std::find(handlers_.begin(), handlers_.end(), h) == handlers_.end()) handlers_.push_back(h);
}

void Dispatcher::on_connection(const net::ConnectionPtr& c, bool inbound) {
  for (auto* h : handlers_) h->on_connection(c, inbound);
}

void Dispatcher::on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) {
  for (auto* h : handlers_) h->on_closed(c, reason);
  if (close_observer_) close_observer_(c, reason);
}

void Dispatcher::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) {
  for (const auto& r : routes_) {
    if (type >= r.first && type <= r.last) {
      r.h->on_message(c, type, std::move(payload));
      return;
    }
  }
  spdlog::warn("dispatcher: unknown message type 0x{:02x} from {} ({}), closing", type,
               c->peer_id(), c->remote_addr());
  c->close(net::CloseReason::UnknownType, "type " + std::to_string(type));
}

}  // namespace gossiptrain::gossip
