// Hostile remotes over real loopback sockets: garbage at each handshake step, silent clients,
// oversized lengths, flipped bits, replays and truncation all end in a closed connection within
// the deadline, deliver nothing, and leave the server serving others.
#include <catch2/catch.hpp>

#include <random>

#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

// Deadline slack for loaded CI machines (the deadlines themselves are 300/1000 ms).
constexpr auto kSlack = 1500ms;

struct Server {
  Recorder events;
  FailureLog failures;
  std::unique_ptr<TcpTransport> t;
  Server() {
    auto c = make_config();
    c.on_handshake_failed = failures.hook();
    t = std::make_unique<TcpTransport>(std::move(c));
    t->set_handler(&events);
    t->start();
  }
  std::string addr() const { return t->listen_addr(); }
  // A well-behaved peer can still connect and deliver a message.
  void check_still_serving() {
    Recorder ev;
    TcpTransport good(make_config());
    good.set_handler(&ev);
    good.start();
    auto r = dial(good, addr());
    REQUIRE(r.conn);
    std::size_t before = events.n_msgs();
    on_io(good, [&] { r.conn->send(9, std::make_shared<const Bytes>(Bytes{1, 2, 3})); });
    REQUIRE(wait_for([&] { return events.n_msgs() == before + 1; }));
    std::lock_guard lk(events.mu);
    CHECK(events.msgs.back().second == Bytes{1, 2, 3});
  }
};

Bytes garbage(std::mt19937& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = std::uint8_t(rng());
  return b;
}

}  // namespace

TEST_CASE("hostile: a silent client is dropped at the handshake deadline", "[net][fault]") {
  Server s;
  RawClient c(s.addr());
  long ms = c.wait_closed(short_limits().handshake_timeout + kSlack);
  CHECK(ms >= 0);
  CHECK(ms >= short_limits().handshake_timeout.count() - 50);
  REQUIRE(wait_for([&] { return s.failures.size() == 1; }));
  CHECK(s.failures.last() == "timeout: handshake");
  s.check_still_serving();
}

TEST_CASE("hostile: a client that stops mid-message is dropped at the idle deadline", "[net][fault]") {
  Server s;
  RawClient c(s.addr());
  REQUIRE(c.handshake());
  RawSealer seal(*c.session, short_limits());
  REQUIRE(c.write(seal.start(1, 100000)));
  long ms = c.wait_closed(short_limits().idle_timeout + kSlack);
  CHECK(ms >= 0);
  REQUIRE(wait_for([&] { return s.events.n_closed() == 1; }));
  CHECK(s.events.last_closed() == "timeout: idle");
  CHECK(s.events.n_msgs() == 0);
  s.check_still_serving();
}

TEST_CASE("hostile: garbage at each handshake step of the responder", "[net][fault]") {
  Server s;
  std::mt19937 rng(77);
  for (int trial = 0; trial < 6; ++trial) {
    {  // step 1: garbage instead of M1 (full size, then short)
      RawClient c(s.addr());
      c.write(garbage(rng, trial % 2 ? Handshake::kM1Bytes : 1 + rng() % 60));
      CHECK(c.wait_closed(short_limits().handshake_timeout + kSlack) >= 0);
    }
    {  // step 3: honest M1, garbage instead of M3
      RawClient c(s.addr());
      HandshakeParams p;
      p.identity = &c.id;
      p.fingerprint = 7;
      Handshake hs(Handshake::Role::Initiator, p);
      REQUIRE(c.write(hs.start()));
      Bytes m2;
      REQUIRE(c.read_exact(m2, Handshake::kM2Bytes));
      c.write(garbage(rng, trial % 2 ? Handshake::kM3Bytes : 1 + rng() % 500));
      CHECK(c.wait_closed(short_limits().handshake_timeout + kSlack) >= 0);
    }
  }
  CHECK(s.events.n_conns() == 0);
  REQUIRE(wait_for([&] { return s.failures.size() == 12; }));
  s.check_still_serving();
}

TEST_CASE("hostile: garbage at each handshake step of the initiator", "[net][fault]") {
  std::mt19937 rng(78);
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::string addr = "127.0.0.1:" + std::to_string(acc.local_endpoint().port());
  Recorder ev;
  TcpTransport client(make_config());
  client.set_handler(&ev);
  client.start();
  for (int step : {2, 4}) {
    auto p = std::make_shared<std::promise<DialResult>>();
    auto f = p->get_future();
    auto t0 = Clock::now();
    client.connect(addr, [p](ConnectionPtr c, const CloseCause& e) {
      p->set_value({c, c ? "" : e.text()});
    });
    asio::ip::tcp::socket sock(io);
    acc.accept(sock);
    Bytes m1(Handshake::kM1Bytes);
    asio::read(sock, asio::buffer(m1));
    if (step == 2) {
      asio::write(sock, asio::buffer(garbage(rng, Handshake::kM2Bytes)));
    } else {
      Identity id = Identity::generate();
      HandshakeParams hp;
      hp.identity = &id;
      hp.fingerprint = 7;
      Handshake hs(Handshake::Role::Responder, hp);
      Bytes m2 = hs.on_message(m1);
      asio::write(sock, asio::buffer(m2));
      Bytes m3(Handshake::kM3Bytes);
      asio::read(sock, asio::buffer(m3));
      asio::write(sock, asio::buffer(garbage(rng, Handshake::kM4Bytes)));
    }
    REQUIRE(f.wait_for(short_limits().handshake_timeout + kSlack) == std::future_status::ready);
    auto r = f.get();
    INFO("step " << step << ": " << r.error);
    CHECK_FALSE(r.conn);
    CHECK(r.error.find("bad MAC") != std::string::npos);
    CHECK(Clock::now() - t0 < short_limits().handshake_timeout + kSlack);
  }
  CHECK(ev.n_conns() == 0);
}

TEST_CASE("hostile: an oversized length prefix closes the connection", "[net][fault]") {
  Server s;
  RawClient c(s.addr());
  REQUIRE(c.handshake());
  std::uint8_t hdr[kFrameHeaderBytes];
  encode_frame_header(hdr, FrameType::Data, 0xfffffff0u);
  c.write(Bytes(hdr, hdr + kFrameHeaderBytes));
  CHECK(c.wait_closed(200ms + kSlack) >= 0);
  REQUIRE(wait_for([&] { return s.events.n_closed() == 1; }));
  CHECK(s.events.last_closed().find("bad length") != std::string::npos);
  s.check_still_serving();
}

TEST_CASE("hostile: a flipped bit in any frame closes the connection and delivers nothing", "[net][fault]") {
  Server s;
  Limits l = short_limits();
  // Stream: a small message, then a streamed one of 2.5 frames. Flip one bit at a time at
  // positions in every frame: header length, header type, ciphertext, tag.
  for (int frame_idx = 0; frame_idx < 5; ++frame_idx) {
    for (int where = 0; where < 4; ++where) {
      RawClient c(s.addr());
      REQUIRE(c.handshake());
      RawSealer seal(*c.session, l);
      std::vector<Bytes> frames;
      frames.push_back(seal.small_message(3, Bytes(100, 0x33)));
      std::size_t total = l.max_frame_bytes * 2 + l.max_frame_bytes / 2;
      frames.push_back(seal.start(4, total));
      for (std::size_t off = 0; off < total; off += l.max_frame_bytes)
        frames.push_back(
            seal.frame(FrameType::Data, Bytes(std::min(l.max_frame_bytes, total - off), 0x44)));
      Bytes& f = frames[std::size_t(frame_idx)];
      std::size_t pos = where == 0 ? 3 : where == 1 ? 4 : where == 2 ? kFrameHeaderBytes + 1 : f.size() - 1;
      f[pos] ^= 0x10;
      for (auto& fr : frames) c.write(fr);
      INFO("frame " << frame_idx << " position " << pos);
      CHECK(c.wait_closed(l.idle_timeout + kSlack) >= 0);
      std::size_t closed_before = s.events.n_closed();
      (void)closed_before;
    }
  }
  REQUIRE(wait_for([&] { return s.events.n_closed() == 20; }));
  // Only the small messages in front of a flipped bit arrive, and never the streamed one.
  std::lock_guard lk(s.events.mu);
  for (auto& m : s.events.msgs) {
    CHECK(m.first == 3);
    CHECK(m.second == Bytes(100, 0x33));
  }
  CHECK(s.events.msgs.size() == 16);  // frames 1..4 flipped: the small message came first
  for (auto& c : s.events.causes) CHECK(c.reason == CloseReason::FrameError);
}

TEST_CASE("hostile: a replayed frame closes the connection", "[net][fault]") {
  Server s;
  RawClient c(s.addr());
  REQUIRE(c.handshake());
  RawSealer seal(*c.session, short_limits());
  Bytes f = seal.small_message(5, Bytes{1, 2, 3});
  c.write(f);
  c.write(f);
  CHECK(c.wait_closed(200ms + kSlack) >= 0);
  REQUIRE(wait_for([&] { return s.events.n_closed() == 1; }));
  CHECK(s.events.last_closed().find("authentication failed") != std::string::npos);
  CHECK(s.events.n_msgs() == 1);
  s.check_still_serving();
}

TEST_CASE("hostile: truncated streams are detected", "[net][fault]") {
  Server s;
  Limits l = short_limits();
  struct Case {
    int cut;  // 0: between messages, 1: inside a message, 2: inside a frame
    const char* reason;
  };
  for (Case k : {Case{0, "EOF without a close frame"}, Case{1, "EOF inside a message"},
                 Case{2, "EOF inside a frame"}}) {
    RawClient c(s.addr());
    REQUIRE(c.handshake());
    RawSealer seal(*c.session, l);
    std::size_t closed_before = s.events.n_closed(), msgs_before = s.events.n_msgs();
    c.write(seal.small_message(1, Bytes{7}));
    if (k.cut >= 1) {
      c.write(seal.start(2, 3 * l.max_frame_bytes));
      c.write(seal.frame(FrameType::Data, Bytes(l.max_frame_bytes, 1)));
    }
    if (k.cut == 2) {
      Bytes fr = seal.frame(FrameType::Data, Bytes(l.max_frame_bytes, 1));
      fr.resize(fr.size() / 2);
      c.write(fr);
    }
    c.shutdown_send();
    CHECK(c.wait_closed(200ms + kSlack) >= 0);
    REQUIRE(wait_for([&] { return s.events.n_closed() == closed_before + 1; }));
    CHECK(s.events.last_closed().find(k.reason) != std::string::npos);
    CHECK(s.events.n_msgs() == msgs_before + 1);  // only the complete small message
  }
  s.check_still_serving();
}

TEST_CASE("hostile: concurrent handshakes and connections are limited", "[net][fault]") {
  Limits l = short_limits();
  l.handshake_timeout = 1500ms;  // the two silent clients must still be handshaking when c comes
  l.max_handshakes_in_flight = 2;
  l.max_connections = 3;
  auto cfg = make_config(7, l);
  FailureLog failures;
  cfg.on_handshake_failed = failures.hook();
  Recorder ev;
  TcpTransport server(std::move(cfg));
  server.set_handler(&ev);
  server.start();
  RawClient a(server.listen_addr()), b(server.listen_addr());
  REQUIRE(wait_for([&] { return server.channel_count() == 2; }));
  RawClient c(server.listen_addr());  // third silent handshake: refused at once
  CHECK(c.wait_closed(200ms) >= 0);
  CHECK(failures.last() == "too many handshakes in flight");
  // The silent ones time out; then honest clients fill up to max_connections.
  REQUIRE(wait_for([&] { return server.channel_count() == 0; }));
  std::vector<std::unique_ptr<TcpTransport>> clients;
  std::vector<ConnectionPtr> conns;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<TcpTransport>(make_config(7, l)));
    clients.back()->start();
    auto r = dial(*clients.back(), server.listen_addr());
    REQUIRE(r.conn);
    conns.push_back(r.conn);
  }
  RawClient d(server.listen_addr());
  CHECK(d.wait_closed(200ms + kSlack) >= 0);
  CHECK(failures.last() == "connection limit reached");
  CHECK(server.stats().refused == 2);
}
