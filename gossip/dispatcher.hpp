// Shares one Transport between several protocols (membership 0x10-0x2F, the averaging exchange
// 0x40-0x5F, catch-up 0x60-0x6F): routes each message by its type byte to the handler that registered that range.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Message type ranges of the protocols that share a transport (the wire contract).
inline constexpr std::uint8_t kMembershipTypeFirst = 0x10;
inline constexpr std::uint8_t kMembershipTypeLast = 0x2F;
inline constexpr std::uint8_t kExchangeTypeFirst = 0x40;
inline constexpr std::uint8_t kExchangeTypeLast = 0x5F;
// Catch-up (gossip/catch_up/catch_up.hpp): 0x60-0x67 go to the serving side, 0x68-0x6F to the fetching side.
inline constexpr std::uint8_t kCatchUpTypeFirst = 0x60;
inline constexpr std::uint8_t kCatchUpTypeLast = 0x6F;

class Dispatcher : public net::TransportHandler {
 public:
  // Registers h (not owned; must outlive the dispatcher's use) for types first..last inclusive.
  // Throws std::invalid_argument on an empty or overlapping range or a null handler. Call before
  // the transport starts delivering events.
  void add(std::uint8_t first_type, std::uint8_t last_type, net::TransportHandler* h);
  // Told of every closed connection, after the protocols (the peer's metrics count them by
  // typed reason). Set before the transport starts delivering events.
  using CloseObserver =
      std::function<void(const net::ConnectionPtr& c, const net::CloseCause& cause)>;
  void set_close_observer(CloseObserver f) { close_observer_ = std::move(f); }

  // Forwarded to every registered handler (each once, in registration order): every protocol sees
  // every connection, and decides itself whether it cares.
  void on_connection(const net::ConnectionPtr& c, bool inbound) override;
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override;
  // Routed by type; a type nobody registered closes the connection with "unknown message type".
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override;

 private:
  struct Route {
    std::uint8_t first, last;
    net::TransportHandler* h;
  };
  std::vector<Route> routes_;
  std::vector<net::TransportHandler*> handlers_;  // distinct, in registration order
  CloseObserver close_observer_;
};

}  // namespace gossiptrain::gossip
