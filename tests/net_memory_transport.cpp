// Tests of the seeded in-memory network: latency on the virtual clock, loss, partitions,
// kill/revive, close timing, timers and determinism for a seed. What every Transport does
// (delivery, close reasons, timers on the protocol thread) is in net_transport.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "net/memory/memory_transport.hpp"

using namespace gossiptrain::net;
using namespace std::chrono_literals;

namespace {

// Records every event with the virtual time at which it happened.
struct Recorder : TransportHandler {
  explicit Recorder(SimTransport& t) : t(t) { t.set_handler(this); }
  struct Msg {
    Millis at;
    std::uint8_t type;
    Bytes payload;
    std::string from;
  };
  void on_connection(const ConnectionPtr& c, bool inbound) override {
    conns.push_back(c);
    (inbound ? inbound_at : outbound_at).push_back(t.now());
  }
  void on_message(const ConnectionPtr& c, std::uint8_t type, Bytes&& payload) override {
    msgs.push_back({t.now(), type, std::move(payload), c->peer_id()});
  }
  void on_closed(const ConnectionPtr&, const CloseCause& reason) override {
    closed.push_back(reason.text());
    closed_at.push_back(t.now());
  }
  SimTransport& t;
  std::vector<ConnectionPtr> conns;
  std::vector<Millis> inbound_at, outbound_at, closed_at;
  std::vector<Msg> msgs;
  std::vector<std::string> closed;
};

SharedBytes bytes(std::initializer_list<std::uint8_t> b) { return std::make_shared<Bytes>(b); }

// Dials from -> to and runs the network until the dial finished; returns the dialer's end.
ConnectionPtr dial(SimNetwork& net, SimTransport& from, const std::string& to,
                   std::string* error = nullptr) {
  ConnectionPtr out;
  bool done = false;
  from.connect(to, [&](ConnectionPtr c, const CloseCause& err) {
    out = c;
    done = true;
    if (error && !c) *error = err.text();
  });
  while (!done && net.step()) {
  }
  REQUIRE(done);
  return out;
}

// Nodes a:1 (id A) and b:1 (id B), each with a Recorder.
struct TwoNodes {
  explicit TwoNodes(SimOptions o = {}) : net(o) {}
  // Dials a -> b and requires that it connected; returns a's end.
  ConnectionPtr connect_ab() {
    ConnectionPtr c = dial(net, a, "b:1");
    REQUIRE(c);
    return c;
  }
  SimNetwork net;
  SimTransport& a = net.add_node("a:1", "A");
  SimTransport& b = net.add_node("b:1", "B");
  Recorder ra{a}, rb{b};
};

}  // namespace

TEST_CASE("memory transport: connect and delivery follow the latency on the virtual clock",
          "[net]") {
  const SimOptions o{.latency = 10ms};
  TwoNodes n(o);
  ConnectionPtr c = n.connect_ab();
  REQUIRE(n.rb.inbound_at.size() == 1);
  CHECK(n.rb.inbound_at[0] == o.latency);  // SYN arrives after one latency
  REQUIRE(n.ra.outbound_at.size() == 1);
  CHECK(n.ra.outbound_at[0] == 2 * o.latency);  // dialer completes after a round trip
  CHECK(c->peer_id() == "B");
  CHECK(c->remote_addr() == "b:1");
  CHECK(n.rb.conns[0]->peer_id() == "A");

  const Millis sent_at = n.net.now();
  REQUIRE(c->send(0x10, bytes({1, 2, 3})));
  n.net.run_until(sent_at + o.latency - 1ms);
  CHECK(n.rb.msgs.empty());
  n.net.run_until(sent_at + o.latency);
  REQUIRE(n.rb.msgs.size() == 1);
  CHECK(n.rb.msgs[0].at == sent_at + o.latency);
  CHECK(n.rb.msgs[0].payload == Bytes{1, 2, 3});
  CHECK(n.rb.msgs[0].from == "A");
}

TEST_CASE("memory transport: messages stay in order per connection under jitter", "[net]") {
  SimOptions o;
  o.latency = 5ms;
  o.jitter = 20ms;
  o.seed = 7;
  TwoNodes n(o);
  ConnectionPtr c = n.connect_ab();
  const int kMessages = 200;
  std::vector<Millis> sent(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    sent[i] = n.net.now();
    REQUIRE(c->send(0x20, bytes({static_cast<std::uint8_t>(i)})));
    n.net.run_for(1ms);
  }
  n.net.run_until_idle();
  REQUIRE(n.rb.msgs.size() == static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    CHECK(n.rb.msgs[i].payload[0] == static_cast<std::uint8_t>(i));
    CHECK(n.rb.msgs[i].at >= sent[i] + o.latency);
    if (i > 0) CHECK(n.rb.msgs[i].at >= n.rb.msgs[i - 1].at);
  }
}

TEST_CASE("memory transport: connect to an unknown or handler-less address fails at the timeout",
          "[net]") {
  SimOptions o;
  o.connect_timeout = 750ms;
  SimNetwork net(o);
  auto& a = net.add_node("a:1", "A");
  net.add_node("mute:1", "M");  // exists, but nobody listens (no handler)
  Recorder ra(a);
  for (const std::string target : {"nowhere:1", "mute:1"}) {
    const Millis start = net.now();
    std::string err;
    CHECK_FALSE(dial(net, a, target, &err));
    CHECK(err == "connect timeout");
    CHECK(net.now() == start + o.connect_timeout);
  }
  CHECK(ra.conns.empty());
  CHECK(net.stats().connects_failed == 2);
}

TEST_CASE("memory transport: a close is reported at once here and one latency later there",
          "[net]") {
  const SimOptions o{.latency = 3ms};
  TwoNodes n(o);
  ConnectionPtr c = n.connect_ab();
  REQUIRE(c->send(1, bytes({9})));  // data sent before the close still arrives, before the FIN
  const Millis closed_at = n.net.now();
  c->close(CloseReason::Shutdown, "bye");
  n.net.run_until_idle();
  REQUIRE(n.ra.closed.size() == 1);
  CHECK(n.ra.closed_at[0] == closed_at);
  REQUIRE(n.rb.msgs.size() == 1);
  REQUIRE(n.rb.closed.size() == 1);
  CHECK(n.rb.closed_at[0] == closed_at + o.latency);
  CHECK_FALSE(n.rb.conns[0]->is_open());
}

TEST_CASE("memory transport: loss drops about the configured fraction", "[net]") {
  SimOptions o;
  o.seed = 42;
  TwoNodes n(o);
  ConnectionPtr c = n.connect_ab();
  const double kLoss = 0.2;
  const int kMessages = 20000;
  n.net.set_loss(kLoss, 0x10, 0x2F);  // only the membership range is lossy
  for (int i = 0; i < kMessages; ++i) REQUIRE(c->send(0x11, bytes({0})));
  for (int i = 0; i < 100; ++i) REQUIRE(c->send(0x40, bytes({1})));  // outside the range
  n.net.run_until_idle();
  std::size_t lossy_delivered = 0, other_delivered = 0;
  for (const auto& m : n.rb.msgs) (m.type == 0x11 ? lossy_delivered : other_delivered)++;
  CHECK(other_delivered == 100);
  const double delivered = static_cast<double>(lossy_delivered) / kMessages;
  // Five binomial standard deviations: a correct implementation fails this ~1 in 10^6 seeds.
  const double tolerance = 5.0 * std::sqrt(kLoss * (1 - kLoss) / kMessages);
  CHECK(std::abs(delivered - (1 - kLoss)) < tolerance);
  CHECK(n.net.stats().dropped_loss == kMessages - lossy_delivered);
}

TEST_CASE("memory transport: a node's own link limits its rate both ways and drops its messages",
          "[net]") {
  SimOptions o;
  o.latency = Millis(5);
  TwoNodes n(o);
  ConnectionPtr c = n.connect_ab();
  auto payload = std::make_shared<Bytes>(999'999);  // 1,000,000 bytes with the type byte
  SECTION("a's link at 1 MB/s: its message leaves in 1 s, then travels 5 ms") {
    n.net.set_link("a:1", 1e6, std::nullopt);
    const Millis t0 = n.net.now();
    REQUIRE(c->send(0x40, payload));
    n.net.run_until_idle();
    REQUIRE(n.rb.msgs.size() == 1);
    CHECK(n.rb.msgs[0].at - t0 == Millis(1005));
  }
  SECTION("b's link at 2 MB/s: two messages to it arrive 0.5 s apart, after the latency") {
    n.net.set_link("b:1", 2e6, std::nullopt);
    const Millis t0 = n.net.now();
    REQUIRE(c->send(0x40, payload));
    REQUIRE(c->send(0x40, payload));
    n.net.run_until_idle();
    REQUIRE(n.rb.msgs.size() == 2);
    CHECK(n.rb.msgs[0].at - t0 == Millis(505));
    CHECK(n.rb.msgs[1].at - t0 == Millis(1005));
  }
  SECTION(
      "loss 1 on b's link drops everything either way, of the lossy types only; cleared, "
      "nothing") {
    n.net.set_loss(0.0, 0x10, 0x2F);
    n.net.set_link("b:1", std::nullopt, 1.0);
    for (int i = 0; i < 10; ++i) REQUIRE(c->send(0x11, bytes({0})));
    REQUIRE(c->send(0x40, bytes({1})));  // outside the lossy range
    n.net.run_until_idle();
    REQUIRE(n.rb.msgs.size() == 1);
    CHECK(n.rb.msgs[0].type == 0x40);
    CHECK(n.net.stats().dropped_loss == 10);
    REQUIRE(n.rb.conns.size() == 1);
    REQUIRE(n.rb.conns[0]->send(0x11, bytes({2})));  // b -> a: b's link too
    n.net.run_until_idle();
    CHECK(n.ra.msgs.empty());
    n.net.set_link("b:1", std::nullopt, std::nullopt);
    REQUIRE(c->send(0x11, bytes({3})));
    n.net.run_until_idle();
    CHECK(n.rb.msgs.size() == 2);
  }
  SECTION("1% loss on a's link slows a TCP-type transfer to the Mathis bound, both ways") {
    n.net.set_loss(0.0, 0x10, 0x2F);
    n.net.set_link("a:1", std::nullopt, 0.01);
    // RTT 10 ms: 1448 / (0.010 * sqrt(0.02 / 3)) = 1.773 MB/s, so 1 MB takes 564 ms, + 5 ms.
    const double rate = 1448.0 / (0.010 * std::sqrt(2.0 * 0.01 / 3.0));
    const auto expect = Millis(static_cast<long>(std::ceil(1000.0 * 1e6 / rate)) + 5);
    const Millis t0 = n.net.now();
    REQUIRE(c->send(0x40, payload));
    REQUIRE(c->send(0x40, payload));  // queued behind the first on the same flow
    n.net.run_until_idle();
    REQUIRE(n.rb.msgs.size() == 2);
    CHECK(n.rb.msgs[0].at - t0 == expect);
    CHECK(n.rb.msgs[1].at - t0 >= 2 * expect - Millis(6));
    REQUIRE(n.rb.conns.size() == 1);
    const Millis t1 = n.net.now();
    REQUIRE(n.rb.conns[0]->send(0x40, payload));  // b -> a crosses a's link as well
    n.net.run_until_idle();
    REQUIRE(n.ra.msgs.size() == 1);
    CHECK(n.ra.msgs[0].at - t1 == expect);
    n.net.set_link("a:1", std::nullopt, std::nullopt);  // restored: full speed again
    const Millis t2 = n.net.now();
    REQUIRE(c->send(0x40, payload));
    n.net.run_until_idle();
    CHECK(n.rb.msgs.back().at - t2 == Millis(5));
    CHECK(n.net.stats().dropped_loss == 0);  // slowed, never dropped
  }
  CHECK_THROWS_AS(n.net.set_link("nowhere:1", 1e6, std::nullopt), std::invalid_argument);
  CHECK_THROWS_AS(n.net.set_link("a:1", 0.0, std::nullopt), std::invalid_argument);
  CHECK_THROWS_AS(n.net.set_link("a:1", std::nullopt, 1.5), std::invalid_argument);
}

TEST_CASE("memory transport: a partition drops messages and connects, heal restores them", "[net]") {
  SimOptions o;
  o.latency = 2ms;
  o.connect_timeout = 300ms;
  TwoNodes n(o);
  auto& c = n.net.add_node("c:1", "C");
  Recorder rc(c);
  ConnectionPtr ab = n.connect_ab();
  ConnectionPtr ac = dial(n.net, n.a, "c:1");
  REQUIRE(ac);

  n.net.partition({{"a:1", "c:1"}, {"b:1"}});
  CHECK_FALSE(n.net.reachable("a:1", "b:1"));
  CHECK(n.net.reachable("a:1", "c:1"));
  REQUIRE(ab->send(1, bytes({1})));  // silently lost, the connection still looks open
  REQUIRE(ac->send(1, bytes({2})));
  n.net.run_until_idle();
  CHECK(n.rb.msgs.empty());
  CHECK(rc.msgs.size() == 1);
  CHECK(ab->is_open());
  CHECK(n.net.stats().dropped_partition == 1);
  std::string err;
  CHECK_FALSE(dial(n.net, n.b, "a:1", &err));
  CHECK(err == "connect timeout");

  n.net.heal();
  REQUIRE(ab->send(1, bytes({3})));
  n.net.run_until_idle();
  REQUIRE(n.rb.msgs.size() == 1);
  CHECK(n.rb.msgs[0].payload == Bytes{3});
  CHECK(dial(n.net, n.b, "a:1"));
}

TEST_CASE("memory transport: kill makes a node vanish, revive brings it back clean", "[net]") {
  const SimOptions o{.latency = 4ms};
  TwoNodes n(o);
  ConnectionPtr ab = n.connect_ab();
  bool b_timer_fired = false;
  n.b.schedule(100ms, [&] { b_timer_fired = true; });

  SECTION("silent kill: the other side only learns by its own timeouts") {
    n.net.kill("b:1");
    CHECK_FALSE(n.b.alive());
    CHECK_FALSE(n.rb.conns[0]->is_open());
    CHECK(ab->send(1, bytes({1})));  // still accepted: like writing into a dead peer
    n.net.run_for(1000ms);
    CHECK(n.rb.msgs.empty());
    CHECK(n.ra.closed.empty());
    CHECK(ab->is_open());
    CHECK_FALSE(b_timer_fired);
    CHECK_FALSE(dial(n.net, n.a, "b:1"));
  }
  SECTION("kill with reset: the other side gets on_closed after one latency") {
    const Millis killed_at = n.net.now();
    n.net.kill("b:1", /*reset=*/true);
    n.net.run_for(1000ms);
    REQUIRE(n.ra.closed == std::vector<std::string>{"io_error: connection reset"});
    CHECK(n.ra.closed_at[0] == killed_at + o.latency);
    CHECK_FALSE(b_timer_fired);
  }
  SECTION("revive: the restarted node takes connections again, old timers stay dead") {
    n.net.kill("b:1");
    // The crashed process's handler (n.rb) is cleared: b only reports to what revive gets.
    auto& b2 = n.net.revive("b:1");
    CHECK(&b2 == &n.b);
    Recorder rb2(b2);
    ConnectionPtr again = dial(n.net, n.a, "b:1");
    REQUIRE(again);
    REQUIRE(again->send(2, bytes({5})));
    n.net.run_for(1000ms);
    REQUIRE(rb2.msgs.size() == 1);
    CHECK(rb2.msgs[0].payload == Bytes{5});
    CHECK_FALSE(b_timer_fired);
  }
}

TEST_CASE("memory transport: timers fire at their virtual time, same-time ones in schedule order",
          "[net]") {
  SimNetwork net;
  auto& a = net.add_node("a:1", "A");
  std::vector<std::pair<int, Millis>> fired;
  a.schedule(30ms, [&] { fired.push_back({1, a.now()}); });
  auto id = a.schedule(20ms, [&] { fired.push_back({2, a.now()}); });
  a.schedule(10ms, [&] { fired.push_back({3, a.now()}); });
  a.schedule(30ms, [&] { fired.push_back({4, a.now()}); });  // same time: in schedule order
  a.cancel(id);
  net.run_until(100ms);
  CHECK(net.now() == 100ms);
  REQUIRE(fired.size() == 3);
  CHECK(fired[0] == std::pair<int, Millis>{3, 10ms});
  CHECK(fired[1] == std::pair<int, Millis>{1, 30ms});
  CHECK(fired[2] == std::pair<int, Millis>{4, 30ms});
}

TEST_CASE("memory transport: run_until never passes its bound, even after skipping cancelled timers", "[net]") {
  SimNetwork net;
  auto& a = net.add_node("a:1", "A");
  bool late_fired = false;
  a.cancel(a.schedule(10ms, [] {}));
  a.schedule(20ms, [&] { late_fired = true; });
  net.run_until(15ms);
  CHECK(net.now() == 15ms);
  CHECK_FALSE(late_fired);
  net.run_until(20ms);
  CHECK(late_fired);
}

TEST_CASE("memory transport: the same seed gives the same run, another seed another", "[net]") {
  auto run = [](std::uint64_t seed) {
    SimOptions o;
    o.seed = seed;
    o.latency = 5ms;
    o.jitter = 15ms;
    o.loss = 0.3;
    SimNetwork net(o);
    std::vector<std::unique_ptr<Recorder>> rec;
    for (int i = 0; i < 4; ++i) {
      rec.push_back(std::make_unique<Recorder>(
          net.add_node("n" + std::to_string(i) + ":1", "N" + std::to_string(i))));
    }
    std::vector<ConnectionPtr> conns;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        if (i != j) conns.push_back(dial(net, rec[i]->t, "n" + std::to_string(j) + ":1"));
      }
    }
    for (int k = 0; k < 300; ++k) {
      auto& c = conns[net.rng().below(conns.size())];
      c->send(static_cast<std::uint8_t>(k % 7), bytes({static_cast<std::uint8_t>(k)}));
      net.run_for(Millis(static_cast<Millis::rep>(net.rng().below(3))));
    }
    net.run_until_idle();
    std::vector<std::tuple<int, Millis::rep, int, std::string>> trace;
    for (int i = 0; i < 4; ++i) {
      for (const auto& m : rec[i]->msgs) trace.emplace_back(i, m.at.count(), m.payload[0], m.from);
    }
    return trace;
  };
  const auto first = run(1234);
  CHECK_FALSE(first.empty());
  CHECK(run(1234) == first);
  CHECK(run(4321) != first);
}

TEST_CASE("memory transport: a paused node runs nothing until resumed, then all that waited",
          "[net]") {
  TwoNodes n(SimOptions{.latency = 10ms});
  ConnectionPtr ab = n.connect_ab();
  int fired = 0;
  n.b.schedule(50ms, [&] { ++fired; });
  const Scheduler::TimerId cancelled = n.b.schedule(60ms, [&] { fired += 100; });
  n.net.pause("b:1");
  CHECK(n.net.paused("b:1"));
  const Millis t0 = n.net.now();
  ab->send(1, bytes({1}));
  ab->send(2, bytes({2}));
  n.net.run_for(200ms);
  CHECK(fired == 0);  // its timer fell due while it was stopped
  CHECK(n.rb.msgs.empty());  // and the messages wait, as in a socket buffer
  n.b.cancel(cancelled);     // a timer that waits can still be cancelled
  n.net.resume("b:1");
  n.net.run_for(1ms);
  CHECK(fired == 1);
  REQUIRE(n.rb.msgs.size() == 2);
  CHECK(n.rb.msgs[0].type == 1);  // in order, delivered at the resume
  CHECK(n.rb.msgs[1].type == 2);
  CHECK(n.rb.msgs[0].at >= t0 + 200ms);
  CHECK(!n.net.paused("b:1"));
  // A kill while paused drops what waited: a revived node starts clean.
  n.b.schedule(5ms, [&] { fired += 10; });
  n.net.pause("b:1");
  n.net.run_for(20ms);
  n.net.kill("b:1");
  n.net.revive("b:1");
  n.net.run_for(100ms);
  CHECK(fired == 1);
  CHECK(!n.net.paused("b:1"));
  CHECK_THROWS_AS(n.net.pause("nowhere:1"), std::invalid_argument);
}
