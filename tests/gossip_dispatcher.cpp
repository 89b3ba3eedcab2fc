// Tests of the Dispatcher: routing by type range, fan-out of connection events, unknown types.
#include <catch2/catch.hpp>

#include "gossip/dispatcher.hpp"
#include "net/memory/memory_transport.hpp"

using namespace gossiptrain;
using namespace std::chrono_literals;

namespace {
struct Count : net::TransportHandler {
  void on_connection(const net::ConnectionPtr&, bool) override { ++connections; }
  void on_message(const net::ConnectionPtr&, std::uint8_t type, net::Bytes&&) override {
    types.push_back(type);
  }
  void on_closed(const net::ConnectionPtr&, const net::CloseCause& r) override {
    closed.push_back(r.text());
  }
  int connections = 0;
  std::vector<std::uint8_t> types;
  std::vector<std::string> closed;
};
}  // namespace

TEST_CASE("dispatcher: routes by type range and fans out connection events", "[gossip]") {
  net::SimNetwork sim;
  auto& a = sim.add_node("a:1", "A");
  auto& b = sim.add_node("b:1", "B");
  Count membership, exchange, client;
  gossip::Dispatcher d;
  d.add(gossip::kMembershipTypeFirst, gossip::kMembershipTypeLast, &membership);
  d.add(gossip::kExchangeTypeFirst, gossip::kExchangeTypeLast, &exchange);
  CHECK_THROWS_AS(d.add(0x2F, 0x30, &exchange), std::invalid_argument);  // overlaps membership
  CHECK_THROWS_AS(d.add(0x31, 0x30, &exchange), std::invalid_argument);  // empty
  CHECK_THROWS_AS(d.add(0x60, 0x61, nullptr), std::invalid_argument);
  b.set_handler(&d);
  a.set_handler(&client);

  net::ConnectionPtr c;
  a.connect("b:1", [&](net::ConnectionPtr conn, const net::CloseCause&) { c = conn; });
  sim.run_until_idle();
  REQUIRE(c);
  CHECK(membership.connections == 1);
  CHECK(exchange.connections == 1);

  auto empty = std::make_shared<net::Bytes>();
  for (std::uint8_t t : {0x10, 0x2F, 0x40, 0x5F, 0x15}) c->send(t, empty);
  sim.run_until_idle();
  CHECK(membership.types == std::vector<std::uint8_t>{0x10, 0x2F, 0x15});
  CHECK(exchange.types == std::vector<std::uint8_t>{0x40, 0x5F});

  c->send(0x30, empty);  // nobody owns 0x30
  sim.run_until_idle();
  CHECK(membership.closed == std::vector<std::string>{"unknown_type: type 48"});
  CHECK(exchange.closed == std::vector<std::string>{"unknown_type: type 48"});
  CHECK(client.closed == std::vector<std::string>{"remote_closed: unknown_type: type 48"});
}
