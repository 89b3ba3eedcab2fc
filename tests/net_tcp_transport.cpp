// TcpTransport over real loopback sockets: handshakes, refusals, large messages, back-pressure,
// shutdown, keepalives and addresses. What every Transport does (delivery in order, close
// reasons, timers on the protocol thread) is in net_transport.cpp.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

struct Pair {
  Recorder server_events, client_events;
  FailureLog server_failures;
  std::unique_ptr<TcpTransport> server, client;
  Pair(TcpTransportConfig sc, TcpTransportConfig cc) {
    sc.on_handshake_failed = server_failures.hook();
    server = std::make_unique<TcpTransport>(std::move(sc));
    client = std::make_unique<TcpTransport>(std::move(cc));
    server->set_handler(&server_events);
    client->set_handler(&client_events);
    server->start();
    client->start();
  }
  // Dials the server from the client.
  DialResult dial_server() { return dial(*client, server->listen_addr()); }
};

Bytes pattern(std::size_t n, std::uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  auto* w = reinterpret_cast<std::uint32_t*>(b.data());
  for (std::size_t i = 0; i < n / 4; ++i) w[i] = rng();
  return b;
}

}  // namespace

TEST_CASE("tcp: handshake and round trip of a 100 MB message, both AEADs", "[net]") {
  std::vector<AeadPreference> prefs{AeadPreference::ChaCha20Poly1305};
  if (crypto::aes256gcm_available()) prefs.push_back(AeadPreference::Aes256Gcm);
  const std::size_t kBytes = 100u << 20;
  auto big = std::make_shared<const Bytes>(pattern(kBytes, 99));
  for (auto pref : prefs) {
    Limits l = short_limits();
    l.idle_timeout = 5000ms;  // sanitizer builds are slow
    l.keepalive_interval = 1000ms;
    auto sc = make_config(7, l), cc = make_config(7, l);
    sc.aead = pref;
    cc.aead = AeadPreference::Auto;
    Pair p(std::move(sc), std::move(cc));
    p.server_events.echo = true;
    auto r = p.dial_server();
    REQUIRE(r.error.empty());
    REQUIRE(r.conn);
    CHECK(r.conn->peer_id() == p.server->local_id());
    REQUIRE(wait_for([&] { return p.server_events.n_conns() == 1; }));
    CHECK(p.server_events.conns[0]->peer_id() == p.client->local_id());
    auto* ch = dynamic_cast<Channel*>(r.conn.get());
    REQUIRE(ch);
    CHECK(ch->aead() == (pref == AeadPreference::Aes256Gcm ? crypto::Aead::Aes256Gcm
                                                           : crypto::Aead::ChaCha20Poly1305));
    CHECK(ch->remote_listen_addr() == p.server->listen_addr());
    CHECK(on_io(*p.client, [&] { return r.conn->send(42, big); }));
    REQUIRE(wait_for([&] { return p.client_events.n_msgs() == 1; }, 60000ms));
    std::lock_guard lk(p.client_events.mu);
    CHECK(p.client_events.msgs[0].first == 42);
    REQUIRE(p.client_events.msgs[0].second.size() == kBytes);
    CHECK(std::memcmp(p.client_events.msgs[0].second.data(), big->data(), kBytes) == 0);
  }
}

TEST_CASE("tcp: each transport receives large messages into buffers from its own pool", "[net]") {
  Pair p(make_config(), make_config());
  auto r = p.dial_server();
  REQUIRE(r.conn);
  const std::size_t kBytes = 1u << 20;  // streamed: one buffer of the pool per message
  auto msg = std::make_shared<const Bytes>(pattern(kBytes, 3));
  CHECK(on_io(*p.client, [&] { return r.conn->send(1, msg); }));
  REQUIRE(wait_for([&] { return p.server_events.n_msgs() == 1; }, 20000ms));
  const auto* mem = p.server_events.msgs[0].second.data();
  CHECK(p.server->buffers().stats().fresh == 1);
  p.server->buffers().recycle(std::move(p.server_events.msgs[0].second));
  CHECK(p.server->buffers().stats().held_bytes >= kBytes);
  CHECK(p.client->buffers().stats().held_bytes == 0);  // the other transport's pool is apart
  CHECK(on_io(*p.client, [&] { return r.conn->send(2, msg); }));
  REQUIRE(wait_for([&] { return p.server_events.n_msgs() == 2; }, 20000ms));
  std::lock_guard lk(p.server_events.mu);
  CHECK(p.server_events.msgs[1].second.data() == mem);  // the recycled buffer, pages mapped
  CHECK(p.server_events.msgs[1].second == *msg);
  CHECK(p.server->buffers().stats().reused == 1);
}

TEST_CASE("tcp: wrong network key is refused", "[net]") {
  crypto::SymKey k1, k2;
  crypto::random_bytes(k1.span());
  crypto::random_bytes(k2.span());
  auto sc = make_config(), cc = make_config();
  sc.network_key = k1;
  SECTION("client without a key") {}
  SECTION("client with another key") { cc.network_key = k2; }
  Pair p(std::move(sc), std::move(cc));
  auto r = p.dial_server();
  CHECK_FALSE(r.conn);
  CHECK_FALSE(r.error.empty());
  REQUIRE(wait_for([&] { return p.server_failures.size() >= 1; }));
  CHECK(p.server_failures.last().find("network key") != std::string::npos);
  CHECK(p.server_events.n_conns() == 0);
}

TEST_CASE("tcp: matching network keys connect", "[net]") {
  crypto::SymKey k;
  crypto::random_bytes(k.span());
  auto sc = make_config(), cc = make_config();
  sc.network_key = k;
  cc.network_key = k;
  Pair p(std::move(sc), std::move(cc));
  CHECK(p.dial_server().conn);
}

TEST_CASE("tcp: a key not on the allowlist is refused", "[net]") {
  auto sc = make_config(), cc = make_config(), other = make_config();
  Allowlist list;
  list.add(other.identity->public_key());
  sc.allowlist = list;
  Pair p(std::move(sc), std::move(cc));
  auto r = p.dial_server();
  CHECK_FALSE(r.conn);
  REQUIRE(wait_for([&] { return p.server_failures.size() >= 1; }));
  CHECK(p.server_failures.last().find("allowlist") != std::string::npos);
  CHECK(p.server_failures.last().find(p.client->local_id()) != std::string::npos);
  CHECK(p.server_events.n_conns() == 0);
}

TEST_CASE("tcp: model fingerprint mismatch is refused with a reason on both sides", "[net]") {
  Pair p(make_config(1), make_config(2));
  auto r = p.dial_server();
  CHECK_FALSE(r.conn);
  CHECK(r.error.find("fingerprint mismatch") != std::string::npos);
  REQUIRE(wait_for([&] { return p.server_failures.size() >= 1; }));
  CHECK(p.server_failures.last().find("fingerprint mismatch") != std::string::npos);
}

TEST_CASE("tcp: a closed channel is released on both sides", "[net]") {
  Pair p(make_config(), make_config());
  auto r = p.dial_server();
  REQUIRE(r.conn);
  REQUIRE(wait_for([&] { return p.server_events.n_conns() == 1; }));
  on_io(*p.client, [&] { r.conn->close(CloseReason::Shutdown, "bye"); });
  REQUIRE(wait_for([&] { return p.server->channel_count() == 0 && p.client->channel_count() == 0; }));
}

TEST_CASE("tcp: the send queue is bounded (back-pressure)", "[net]") {
  Limits l = short_limits();
  l.send_queue_max_messages = 2;
  Pair p(make_config(7, l), make_config(7, l));
  auto r = p.dial_server();
  REQUIRE(r.conn);
  auto payload = std::make_shared<const Bytes>(Bytes(1 << 20, 1));
  int accepted = on_io(*p.client, [&] {
    int n = 0;
    for (int i = 0; i < 5; ++i) n += r.conn->send(1, payload) ? 1 : 0;
    return n;
  });
  CHECK(accepted == 2);
  REQUIRE(wait_for([&] { return p.server_events.n_msgs() == 2; }));
  CHECK(on_io(*p.client, [&] { return r.conn->send(1, payload); }));
  // Larger than max_message_bytes: refused up front.
  CHECK_FALSE(on_io(*p.client, [&] {
    return r.conn->send(1, std::make_shared<const Bytes>(Bytes(l.max_message_bytes + 1)));
  }));
}

TEST_CASE("tcp: stop closes every connection with reason shutdown", "[net]") {
  Pair p(make_config(), make_config());
  auto r = p.dial_server();
  REQUIRE(r.conn);
  REQUIRE(wait_for([&] { return p.server_events.n_conns() == 1; }));
  auto t0 = Clock::now();
  p.server->stop();
  CHECK(Clock::now() - t0 < 2000ms);
  CHECK(p.server_events.last_closed() == "shutdown");
  REQUIRE(wait_for([&] { return p.client_events.n_closed() == 1; }));
  CHECK(p.client_events.last_closed() == "remote_closed: shutdown");
  p.server->stop();  // idempotent
}

TEST_CASE("tcp: idle connections stay up through keepalives", "[net]") {
  Pair p(make_config(), make_config());
  auto r = p.dial_server();
  REQUIRE(r.conn);
  // Three idle timeouts of silence from the application.
  auto until = Clock::now() + 3 * short_limits().idle_timeout;
  wait_for([&] { return Clock::now() > until || p.client_events.n_closed() > 0; }, 5000ms);
  CHECK(p.client_events.n_closed() == 0);
  CHECK(on_io(*p.client, [&] { return r.conn->is_open(); }));
}

TEST_CASE("tcp: dials to a bad address or to ourselves fail", "[net]") {
  TcpTransport t(make_config());
  t.start();
  CHECK(dial(t, "not-an-address").error.find("bad address") != std::string::npos);
  CHECK_FALSE(dial(t, t.listen_addr()).conn);  // ourselves
}

TEST_CASE("tcp: bad configuration throws ConfigError", "[net]") {
  auto c = make_config();
  c.identity = nullptr;
  CHECK_THROWS_AS(TcpTransport(c), ConfigError);
  auto d = make_config();
  d.limits.max_frame_bytes = 1u << 30;
  CHECK_THROWS_AS(TcpTransport(d), ConfigError);
  auto e = make_config();
  e.listen = "nohostport";
  CHECK_THROWS_AS(TcpTransport(e), ConfigError);
  TcpTransport a(make_config());
  a.start();
  auto f = make_config();
  f.listen = a.listen_addr();
  TcpTransport b(f);
  CHECK_THROWS_AS(b.start(), ConfigError);  // address in use
}

TEST_CASE("tcp: keys ratchet on schedule over a real connection", "[net]") {
  Limits l = short_limits();
  l.rekey_after_frames = 4;
  l.rekey_after_bytes = 3u << 20;
  l.max_frame_bytes = 256 * 1024;
  auto sc = make_config(7, l), cc = make_config(7, l);
  sc.aead = AeadPreference::ChaCha20Poly1305;
  Pair p(std::move(sc), std::move(cc));
  p.server_events.echo = true;
  auto r = p.dial_server();
  REQUIRE(r.conn);
  auto msg = std::make_shared<const Bytes>(pattern(10u << 20, 5));
  for (int i = 0; i < 3; ++i) CHECK(on_io(*p.client, [&] { return r.conn->send(1, msg); }));
  REQUIRE(wait_for([&] { return p.client_events.n_msgs() == 3; }, 60000ms));
  std::lock_guard lk(p.client_events.mu);
  for (auto& m : p.client_events.msgs) CHECK(m.second == *msg);
  CHECK(p.client_events.closed.empty());
}

TEST_CASE("tcp: a wildcard listen address needs an advertised one, which is what peers learn", "[net]") {
  auto wild = make_config();
  wild.listen = "0.0.0.0:0";
  CHECK_THROWS_WITH(TcpTransport(wild), Catch::Contains("needs an advertised address"));
  auto v6 = make_config();
  v6.listen = "[::]:0";
  CHECK_THROWS_WITH(TcpTransport(v6), Catch::Contains("needs an advertised address"));
  auto bad_adv = make_config();
  bad_adv.advertise = "0.0.0.0:7000";
  CHECK_THROWS_WITH(TcpTransport(bad_adv), Catch::Contains("not one another machine can dial"));

  // Bound to every interface, advertising the loopback address with the bound port: the
  // handshake carries the advertised address, not 0.0.0.0.
  TcpTransportConfig probe = make_config();
  probe.listen = "127.0.0.1:0";
  TcpTransport finder(probe);
  finder.start();
  const std::string free_port = finder.listen_addr().substr(finder.listen_addr().rfind(':') + 1);
  finder.stop();
  auto sc = make_config();
  sc.listen = "0.0.0.0:" + free_port;
  sc.advertise = "127.0.0.1:" + free_port;
  Pair p(std::move(sc), make_config());
  CHECK(p.server->listen_addr() == "0.0.0.0:" + free_port);
  CHECK(p.server->advertised_addr() == "127.0.0.1:" + free_port);
  auto r = dial(*p.client, p.server->advertised_addr());
  REQUIRE(r.error.empty());
  auto* ch = dynamic_cast<Channel*>(r.conn.get());
  REQUIRE(ch);
  CHECK(ch->remote_listen_addr() == "127.0.0.1:" + free_port);
}

TEST_CASE("address: wildcards and dialable addresses", "[net]") {
  for (const char* h : {"0.0.0.0", "::", "0:0:0:0:0:0:0:0", "::0.0.0.0", "*", "0"})
    CHECK(is_wildcard_host(h));
  for (const char* h : {"10.0.0.1", "127.0.0.1", "::1", "localhost", "example.org", "...", ""})
    CHECK_FALSE(is_wildcard_host(h));
  CHECK(dialable_addr("10.77.0.1:7000"));
  CHECK(dialable_addr("[::1]:7000"));
  CHECK_FALSE(dialable_addr("0.0.0.0:7000"));
  CHECK_FALSE(dialable_addr("[::]:7000"));
  CHECK_FALSE(dialable_addr("10.0.0.1:0"));
  CHECK_FALSE(dialable_addr("10.0.0.1"));
}
