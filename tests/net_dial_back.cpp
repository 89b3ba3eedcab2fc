// Dial-backs (net/nat/dial_back.cpp, docs/nat.md): reverse connections to a peer that cannot be
// dialled, the reachability self-check, their bounds, and malformed dial-back messages. "Cannot be
// dialled" is a peer that advertises an address where nothing listens (what a LAN address behind a
// NAT is to everybody outside), while it really listens elsewhere.
#include <catch2/catch.hpp>

#include "net/nat/dial_back_messages.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

struct Pair {
  Recorder ra, rb;
  std::unique_ptr<TcpTransport> a, b;  // a: reachable; b: advertises an address nobody can dial
  std::string b_adv = dead_addr();
  explicit Pair(bool check = false) {
    auto ca = make_config();
    ca.nat.reachability_check = check;
    a = std::make_unique<TcpTransport>(ca);
    auto cb = make_config();
    cb.advertise = b_adv;
    cb.nat.reachability_check = check;
    b = std::make_unique<TcpTransport>(cb);
    a->set_handler(&ra);
    b->set_handler(&rb);
    a->start();
    b->start();
  }
};

}  // namespace

TEST_CASE("dial-back messages round-trip, and their decoders refuse every malformed form",
          "[net][nat]") {
  const auto rq = decode_dial_back_request(encode(DialBackRequest{DialBackPurpose::Check, 42}));
  CHECK(rq.purpose == DialBackPurpose::Check);
  CHECK(rq.nonce == 42);
  const auto rs = decode_dial_back_result(encode(DialBackResult{7, false, "connect timeout"}));
  CHECK(rs.nonce == 7);
  CHECK(!rs.ok);
  CHECK(rs.reason == "connect timeout");
  CHECK(decode_dial_back_result(encode(DialBackResult{7, false, std::string(500, 'x')}))
            .reason.size() == kMaxDialBackReasonBytes);
  CHECK(decode_dial_back_hello(encode(DialBackHello{9})).nonce == 9);
  CHECK(decode_reachability(encode(ReachabilityMsg{true})).dialable);

  auto bad = [](Bytes b, auto decode) {
    CHECK_THROWS_AS(decode(b), gossiptrain::base::DecodeError);
  };
  Bytes req = encode(DialBackRequest{DialBackPurpose::Reverse, 1});
  bad(Bytes{}, decode_dial_back_request);
  bad(Bytes(req.begin(), req.end() - 1), decode_dial_back_request);  // truncated
  Bytes longer = req;
  longer.push_back(0);
  bad(longer, decode_dial_back_request);  // trailing byte
  Bytes v = req;
  v[0] = 9;
  bad(v, decode_dial_back_request);  // unknown version
  Bytes purpose = req;
  purpose[1] = 2;
  bad(purpose, decode_dial_back_request);  // unknown purpose
  Bytes res = encode(DialBackResult{1, false, "ab"});
  Bytes flag = res;
  flag[9] = 2;
  bad(flag, decode_dial_back_result);  // ok flag not 0/1
  Bytes len = res;
  len[10] = 3;  // says 3 bytes of reason, 2 follow
  bad(len, decode_dial_back_result);
  Bytes ctl = res;
  ctl[11] = '\n';
  bad(ctl, decode_dial_back_result);  // not printable
  bad(Bytes{kDialBackVersion, 2}, decode_reachability);
  bad(Bytes{kDialBackVersion}, decode_dial_back_hello);
}

TEST_CASE("a peer that cannot be dialled is reached over a reverse connection it dials on request",
          "[net][nat]") {
  Pair p;
  // b dials a (it can: a is reachable); a's direct dial of b's advertised address fails.
  auto ab = dial(*p.b, p.a->advertised_addr());
  REQUIRE(ab.conn);
  REQUIRE(wait_for([&] { return p.ra.n_conns() == 1; }));
  auto ba = dial(*p.a, p.b_adv);
  INFO(ba.error);
  REQUIRE(ba.conn);
  CHECK(ba.conn->peer_id() == p.b->local_id());
  CHECK(ba.conn != p.ra.conns[0]);  // a connection of its own, not the one b opened
  // It carries messages both ways.
  on_io(*p.a, [&] { ba.conn->send(0x40, std::make_shared<const Bytes>(Bytes{1, 2, 3})); });
  REQUIRE(wait_for([&] { return p.rb.n_msgs() == 1; }));
  CHECK(p.a->stats().nat.reverse_connections == 1);
  CHECK(p.b->stats().nat.dial_backs_served == 1);
  // The address is now known not to be dialable: the next connect asks at once.
  auto again = dial(*p.a, p.b_adv);
  REQUIRE(again.conn);
  CHECK(p.a->stats().nat.reverse_connections == 2);
  // Dial-backs never reach the handler (the control messages are the transport's own).
  {
    std::lock_guard lk(p.ra.mu);
    for (const auto& [t, b] : p.ra.msgs) CHECK(t < kDialBackTypeFirst);
  }
  // Without a connection from the peer there is nobody to ask: the dial just fails.
  on_io(*p.a, [&] { ab.conn.reset(); });
  on_io(*p.b, [&] {
    for (auto& c : p.rb.conns) c->close(CloseReason::Shutdown, "test");
  });
  REQUIRE(wait_for([&] { return p.a->channel_count() == 0; }));
  CHECK(!dial(*p.a, p.b_adv).conn);
}

TEST_CASE("the reachability self-check tells a reachable peer and an unreachable one apart",
          "[net][nat]") {
  Pair p(true);
  auto ab = dial(*p.b, p.a->advertised_addr());
  REQUIRE(ab.conn);
  REQUIRE(wait_for([&] { return p.b->reachability() != Reachability::Unknown; }));
  CHECK(p.b->reachability() == Reachability::Unreachable);
  // a learns it from b's announcement: its next connect to b is reversed at once, without trying
  // the dead address first.
  REQUIRE(wait_for([&] { return on_io(*p.a, [&] { return p.a->known_undialable(p.b_adv); }); }));
  const auto failures_before = p.a->stats().handshake_failures;
  auto ba = dial(*p.a, p.b_adv);
  REQUIRE(ba.conn);
  CHECK(p.a->stats().handshake_failures == failures_before);
  // a (reachable) dials b's real listen address: b checks a back and finds it reachable.
  auto ab2 = dial(*p.a, p.b->listen_addr());
  REQUIRE(ab2.conn);
  REQUIRE(wait_for([&] { return p.a->reachability() != Reachability::Unknown; }));
  CHECK(p.a->reachability() == Reachability::Reachable);
}

TEST_CASE("dial-back requests are bounded: one check per requester per 10 s, only its own "
          "advertised address, and a malformed one closes the connection with a reason",
          "[net][nat][fault]") {
  Pair p;
  auto ab = dial(*p.b, p.a->advertised_addr());
  REQUIRE(ab.conn);
  // b asks a for a check twice in a row: the second is refused (busy), not dialled.
  on_io(*p.b, [&] {
    for (std::uint64_t n : {1, 2})
      ab.conn->send(std::uint8_t(DialBackType::Request),
                    std::make_shared<const Bytes>(encode(DialBackRequest{DialBackPurpose::Check, n})));
  });
  REQUIRE(wait_for([&] { return p.a->stats().nat.dial_backs_refused == 1; }));
  CHECK(p.a->stats().nat.dial_backs_served == 1);
  // a dialled b's advertised (dead) address and nothing else: it failed, b never got a connection.
  CHECK(p.rb.n_conns() == 1);
  // A malformed request: a closes the connection, naming what was wrong.
  on_io(*p.b, [&] {
    ab.conn->send(std::uint8_t(DialBackType::Request), std::make_shared<const Bytes>(Bytes{1, 2}));
  });
  REQUIRE(wait_for([&] { return p.ra.n_closed() == 1; }));
  CHECK(p.ra.last_cause().reason == CloseReason::Malformed);
  CHECK(p.ra.last_closed().find("dial-back request") != std::string::npos);
  // A hello that answers no request of a's is refused too.
  auto ab2 = dial(*p.b, p.a->advertised_addr());
  REQUIRE(ab2.conn);
  on_io(*p.b, [&] {
    ab2.conn->send(std::uint8_t(DialBackType::Hello),
                   std::make_shared<const Bytes>(encode(DialBackHello{123})));
  });
  REQUIRE(wait_for([&] { return p.ra.n_closed() == 2; }));
  CHECK(p.ra.last_closed().find("not expected") != std::string::npos);
}
