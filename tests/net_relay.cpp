// Relays (net/nat/relay.cpp, docs/nat.md): two peers that cannot dial each other (each advertises
// an address where nothing listens, as a LAN address behind a NAT is to the other site) talk
// through a reachable third one, end to end encrypted; a hostile relay that corrupts the bytes is
// detected by the endpoints' channel authentication, the connection closes with the reason,
// nothing of the corrupted message is delivered, and the next connection takes another relay; a
// relay that silently drops everything is caught by the idle deadline, with the same outcome; a
// relay that dies is replaced by another one for the next connection.
#include <catch2/catch.hpp>

#include <atomic>

#include "net/nat/dial_back_messages.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

Limits relay_limits() {
  Limits l = short_limits();
  l.handshake_timeout = 3000ms;  // a relayed connection takes a few round trips more
  l.idle_timeout = 5000ms;
  return l;
}

struct Node {
  Recorder rec;
  std::string adv;
  std::unique_ptr<TcpTransport> t;
  explicit Node(bool hidden, std::function<std::size_t(std::uint8_t*, std::size_t)> tamper = {}) {
    auto c = make_config(7, relay_limits());
    if (hidden) c.advertise = adv = dead_addr();
    c.nat.relay_tamper = std::move(tamper);
    t = std::make_unique<TcpTransport>(c);
    t->set_handler(&rec);
    t->start();
    if (!hidden) adv = t->advertised_addr();
  }
};

std::size_t messages_of_type(Recorder& r, std::uint8_t type) {
  std::lock_guard lk(r.mu);
  std::size_t n = 0;
  for (const auto& [t, b] : r.msgs) n += t == type;
  return n;
}

// a and b (hidden) connect to the relay, then a dials b, which goes through it.
DialResult dial_through(Node& relay, Node& a, Node& b) {
  REQUIRE(dial(*a.t, relay.adv).conn);
  REQUIRE(dial(*b.t, relay.adv).conn);
  REQUIRE(wait_for([&] { return relay.t->channel_count() == 2; }));
  return dial(*a.t, b.adv);
}

// After a relayed connection through `bad` failed: an honest relay joins, and the next three
// connections from a to b (whatever the shuffle of candidates) go through it and deliver msg.
void next_connections_avoid(Node& bad, Node& a, Node& b, const Bytes& msg) {
  Node good(false);
  REQUIRE(dial(*a.t, good.adv).conn);
  REQUIRE(dial(*b.t, good.adv).conn);
  REQUIRE(wait_for([&] { return good.t->channel_count() == 2; }));
  const std::size_t before = messages_of_type(b.rec, 0x44);
  for (std::size_t i = 1; i <= 3; ++i) {
    auto again = dial(*a.t, b.adv);
    INFO(again.error);
    REQUIRE(again.conn);
    on_io(*a.t, [&] { again.conn->send(0x44, std::make_shared<const Bytes>(msg)); });
    REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == before + i; }));
  }
  CHECK(good.t->stats().nat.relays_served == 3);
  CHECK(bad.t->stats().nat.relays_served == 1);
}

}  // namespace

TEST_CASE("two peers that cannot dial each other connect through a relay that sees only "
          "ciphertext", "[net][nat]") {
  Node r(false), a(true), b(true);
  auto ab = dial_through(r, a, b);
  INFO(ab.error);
  REQUIRE(ab.conn);
  CHECK(ab.conn->peer_id() == b.t->local_id());  // authenticated end to end: b's own key
  CHECK(a.t->stats().nat.relayed_connections == 1);
  CHECK(r.t->stats().nat.relays_served == 1);
  // A message of 200 kB both ways.
  const Bytes big(200000, 0x5a);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(big)); });
  REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == 1; }));
  {
    std::lock_guard lk(b.rec.mu);
    CHECK(b.rec.msgs.back().second == big);
  }
  // The relay counts a piece once its write to b completes, which may be after b has read it.
  CHECK(wait_for([&] { return r.t->stats().nat.relayed_bytes > big.size(); }));
  CHECK(r.rec.n_msgs() == 0);  // the relay's own protocols never saw a message of theirs
  // The relay's loss closes the relayed connection at both ends.
  r.t->stop();
  REQUIRE(wait_for([&] { return !on_io(*a.t, [&] { return ab.conn->is_open(); }); }));
}

TEST_CASE("a hostile relay that corrupts relayed bytes: the endpoints' authentication closes the "
          "connection with the reason, nothing corrupted is delivered, and the next connection "
          "takes another relay", "[net][nat][fault]") {
  std::atomic<std::size_t> seen{0};
  // Corrupts one byte once the handshake is through (it is about 1 kB).
  auto tamper = [&seen](std::uint8_t* d, std::size_t n) -> std::size_t {
    const std::size_t before = seen.fetch_add(n);
    if (before + n > 4000 && before < 1000000) d[n / 2] ^= 0x01;
    return n;
  };
  Node bad(false, tamper), a(true), b(true);
  auto ab = dial_through(bad, a, b);
  INFO(ab.error);
  REQUIRE(ab.conn);
  const Bytes big(100000, 0x33);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(big)); });
  // b's channel finds a frame that does not authenticate and closes; a sees the stream cut.
  REQUIRE(wait_for([&] { return b.rec.n_closed() >= 1 && a.rec.n_closed() >= 1; }));
  CHECK(b.rec.last_cause().reason == CloseReason::FrameError);
  CHECK(b.rec.last_closed().find("authentication failed") != std::string::npos);
  CHECK(a.rec.last_cause().reason == CloseReason::Truncated);
  CHECK(messages_of_type(b.rec, 0x44) == 0);  // nothing partial delivered

  next_connections_avoid(bad, a, b, big);  // the next connections avoid the hostile one
}

TEST_CASE("a hostile relay that silently drops relayed bytes: both endpoints close the relayed "
          "connection within the idle deadline with the reason, nothing partial is delivered, and "
          "the next connection takes another relay", "[net][nat][fault]") {
  std::atomic<std::size_t> seen{0};
  // Forwards the handshake (about 1 kB) and the first frames, then drops every byte, both ways:
  // both sockets stay open, nothing comes through.
  auto drop = [&seen](std::uint8_t*, std::size_t n) -> std::size_t {
    return seen.fetch_add(n) + n > 4000 ? 0 : n;
  };
  Node bad(false, drop), a(true), b(true);
  auto ab = dial_through(bad, a, b);
  INFO(ab.error);
  REQUIRE(ab.conn);
  const auto sent_at = std::chrono::steady_clock::now();
  const Bytes big(100000, 0x33);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(big)); });
  // Both ends close it: the first at its idle deadline (no frame, not even a keepalive, for
  // idle_timeout), the other then or on the stream cut that follows (the relay closes both sides
  // when one goes).
  const auto idle = relay_limits().idle_timeout;
  REQUIRE(wait_for([&] { return b.rec.n_closed() >= 1 && a.rec.n_closed() >= 1; }, idle + 8000ms));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - sent_at);
  INFO("closed after " << took.count() << " ms; a: " << a.rec.last_closed()
                       << "; b: " << b.rec.last_closed());
  CHECK(took >= idle - 500ms);   // nothing closed it before the deadline
  CHECK(took <= idle + 4000ms);  // and the deadline did (slack for a loaded machine)
  const auto ra = a.rec.last_cause().reason, rb = b.rec.last_cause().reason;
  CHECK((ra == CloseReason::Timeout || rb == CloseReason::Timeout));
  for (const auto r : {ra, rb}) CHECK((r == CloseReason::Timeout || r == CloseReason::Truncated));
  CHECK(!on_io(*a.t, [&] { return ab.conn->is_open(); }));
  CHECK(messages_of_type(b.rec, 0x44) == 0);  // nothing partial delivered

  next_connections_avoid(bad, a, b, big);  // the next connections avoid the silent one
}

TEST_CASE("when the relay in use dies, both endpoints see the relayed connection close, and the "
          "next connection to the NATed peer goes through another relay, both ways",
          "[net][nat][fault]") {
  Node r1(false), r2(false), a(true), b(true);
  for (Node* n : {&a, &b}) {
    REQUIRE(dial(*n->t, r1.adv).conn);
    REQUIRE(dial(*n->t, r2.adv).conn);
  }
  REQUIRE(wait_for([&] { return r1.t->channel_count() == 2 && r2.t->channel_count() == 2; }));
  auto ab = dial(*a.t, b.adv);
  INFO(ab.error);
  REQUIRE(ab.conn);
  const bool first = r1.t->stats().nat.relays_served == 1;
  Node& used = first ? r1 : r2;
  Node& other = first ? r2 : r1;
  REQUIRE(used.t->stats().nat.relays_served == 1);
  REQUIRE(other.t->stats().nat.relays_served == 0);
  const Bytes msg(50000, 0x21);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(msg)); });
  REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == 1; }));
  // b's end of the relayed connection.
  auto b_end = [&]() -> ConnectionPtr {
    std::lock_guard lk(b.rec.mu);
    for (auto it = b.rec.conns.rbegin(); it != b.rec.conns.rend(); ++it)
      if ((*it)->peer_id() == a.t->local_id()) return *it;
    return nullptr;
  };
  auto ba = b_end();
  REQUIRE(ba);

  used.t->stop();  // the relay is gone (its sockets close, as when its process dies)
  REQUIRE(wait_for([&] { return !on_io(*a.t, [&] { return ab.conn->is_open(); }); }, 5000ms));
  REQUIRE(wait_for([&] { return !on_io(*b.t, [&] { return ba->is_open(); }); }, 5000ms));

  // The next connection takes the other relay; traffic flows again, both ways.
  auto again = dial(*a.t, b.adv);
  INFO(again.error);
  REQUIRE(again.conn);
  CHECK(again.conn->peer_id() == b.t->local_id());
  CHECK(other.t->stats().nat.relays_served == 1);
  on_io(*a.t, [&] { again.conn->send(0x44, std::make_shared<const Bytes>(msg)); });
  REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == 2; }));
  REQUIRE(wait_for([&] {
    auto c = b_end();
    return c && c != ba && on_io(*b.t, [&] { return c->is_open(); });
  }));
  auto ba2 = b_end();
  on_io(*b.t, [&] { ba2->send(0x45, std::make_shared<const Bytes>(msg)); });
  REQUIRE(wait_for([&] { return messages_of_type(a.rec, 0x45) == 1; }));
  CHECK(a.t->stats().nat.relayed_connections == 2);
}

TEST_CASE("relay requests are validated and bounded", "[net][nat][fault]") {
  // Decoders.
  const auto m = decode_relay_ask(encode(RelayAsk{5, "10.0.0.1:7000"}));
  CHECK(m.nonce == 5);
  CHECK(m.target == "10.0.0.1:7000");
  CHECK(decode_relay_dial(encode(RelayDial{6})).nonce == 6);
  CHECK_THROWS_AS(decode_relay_ask(encode(RelayAsk{5, ""})), gossiptrain::base::DecodeError);
  Bytes ctl = encode(RelayAsk{5, "a b"});
  CHECK_THROWS_AS(decode_relay_ask(ctl), gossiptrain::base::DecodeError);
  Bytes trunc = encode(RelayAsk{5, "10.0.0.1:7000"});
  trunc.pop_back();
  CHECK_THROWS_AS(decode_relay_ask(trunc), gossiptrain::base::DecodeError);
  CHECK_THROWS_AS(decode_relay_dial(Bytes{kDialBackVersion, 1, 2}), gossiptrain::base::DecodeError);
  std::uint64_t nonce = 0;
  std::uint8_t side = 0;
  const Bytes pre = relay_preamble(77, 1);
  CHECK(parse_relay_preamble(pre.data(), nonce, side));
  CHECK((nonce == 77 && side == 1));
  Bytes bad_side = pre;
  bad_side.back() = 2;
  CHECK(!parse_relay_preamble(bad_side.data(), nonce, side));

  // A relay with relaying off refuses; a relay not connected to the target refuses; the asker's
  // connect then fails with the reason, in bounded time.
  Node a(true), b(true);
  auto c = make_config(7, relay_limits());
  c.nat.relay_max_bytes_per_s = 0;
  // The handler first: it must outlive the transport, whose stop() (in its destructor) reports
  // the closes of its connections to it.
  Recorder ro;
  TcpTransport off(c);
  off.set_handler(&ro);
  off.start();
  REQUIRE(dial(*a.t, off.advertised_addr()).conn);
  REQUIRE(dial(*b.t, off.advertised_addr()).conn);
  auto ab = dial(*a.t, b.adv);
  CHECK(!ab.conn);
  CHECK(ab.error.find("relaying is off") != std::string::npos);
  Node r(false);
  REQUIRE(dial(*a.t, r.adv).conn);  // b is not connected to r
  auto ab2 = dial(*a.t, b.adv);
  CHECK(!ab2.conn);
  CHECK(ab2.error.find("no relay could reach it") != std::string::npos);
  // A raw connection with a relay preamble for no relay in flight is closed at once.
  RawClient raw(r.adv);
  REQUIRE(raw.write(relay_preamble(12345, 0)));
  CHECK(raw.wait_closed(2000ms) >= 0);
  // (The relay counts the socket until its reading coroutine has ended, just after the close.)
  CHECK(wait_for([&] { return r.t->channel_count() == 1; }, 2000ms));
}
