// Relays (net/tcp_relay.cpp, docs/nat.md): two peers that cannot dial each other (each advertises
// an address where nothing listens, as a LAN address behind a NAT is to the other site) talk
// through a reachable third one, end to end encrypted; a hostile relay that corrupts the bytes is
// detected by the endpoints' channel authentication, the connection closes with the reason,
// nothing of the corrupted message is delivered, and the next connection takes another relay.
#include <catch2/catch.hpp>

#include <atomic>

#include "net/dial_back_messages.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

std::string dead_addr() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = a.local_endpoint().port();
  a.close();
  return "127.0.0.1:" + std::to_string(port);
}

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
  explicit Node(bool hidden, std::function<void(std::uint8_t*, std::size_t)> tamper = {}) {
    auto c = make_config(7, relay_limits());
    if (hidden) c.advertise = adv = dead_addr();
    c.relay_tamper = std::move(tamper);
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

}  // namespace

TEST_CASE("two peers that cannot dial each other connect through a relay that sees only "
          "ciphertext", "[net][nat]") {
  Node r(false), a(true), b(true);
  auto ar = dial(*a.t, r.adv);
  auto br = dial(*b.t, r.adv);
  REQUIRE(ar.conn);
  REQUIRE(br.conn);
  REQUIRE(wait_for([&] { return r.t->channel_count() == 2; }));
  auto ab = dial(*a.t, b.adv);
  INFO(ab.error);
  REQUIRE(ab.conn);
  CHECK(ab.conn->peer_id() == b.t->local_id());  // authenticated end to end: b's own key
  CHECK(a.t->stats().relayed_connections == 1);
  CHECK(r.t->stats().relays_served == 1);
  // A message of 200 kB both ways.
  const Bytes big(200000, 0x5a);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(big)); });
  REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == 1; }));
  {
    std::lock_guard lk(b.rec.mu);
    CHECK(b.rec.msgs.back().second == big);
  }
  CHECK(r.t->stats().relayed_bytes > big.size());
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
  auto tamper = [&seen](std::uint8_t* d, std::size_t n) {
    const std::size_t before = seen.fetch_add(n);
    if (before + n > 4000 && before < 1000000) d[n / 2] ^= 0x01;
  };
  Node bad(false, tamper), a(true), b(true);
  REQUIRE(dial(*a.t, bad.adv).conn);
  REQUIRE(dial(*b.t, bad.adv).conn);
  REQUIRE(wait_for([&] { return bad.t->channel_count() == 2; }));
  auto ab = dial(*a.t, b.adv);
  INFO(ab.error);
  REQUIRE(ab.conn);
  const Bytes big(100000, 0x33);
  on_io(*a.t, [&] { ab.conn->send(0x44, std::make_shared<const Bytes>(big)); });
  // b's channel finds a frame that does not authenticate and closes; a sees the stream cut.
  REQUIRE(wait_for([&] { return b.rec.n_closed() >= 1 && a.rec.n_closed() >= 1; }));
  CHECK(close_reason_of(b.rec.last_closed()) == CloseReason::FrameError);
  CHECK(b.rec.last_closed().find("authentication failed") != std::string::npos);
  CHECK(close_reason_of(a.rec.last_closed()) == CloseReason::Truncated);
  CHECK(messages_of_type(b.rec, 0x44) == 0);  // nothing partial delivered

  // An honest relay joins; the next connection avoids the hostile one.
  Node good(false);
  REQUIRE(dial(*a.t, good.adv).conn);
  REQUIRE(dial(*b.t, good.adv).conn);
  REQUIRE(wait_for([&] { return good.t->channel_count() == 2; }));
  for (int i = 0; i < 3; ++i) {  // whatever the shuffle of candidates
    auto again = dial(*a.t, b.adv);
    INFO(again.error);
    REQUIRE(again.conn);
    on_io(*a.t, [&] { again.conn->send(0x44, std::make_shared<const Bytes>(big)); });
    REQUIRE(wait_for([&] { return messages_of_type(b.rec, 0x44) == std::size_t(i + 1); }));
  }
  CHECK(good.t->stats().relays_served == 3);
  CHECK(bad.t->stats().relays_served == 1);
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
  c.relay_max_bytes_per_s = 0;
  TcpTransport off(c);
  Recorder ro;
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
  CHECK(r.t->channel_count() == 1);
}
