// The in-memory network's model of real links: log-normal latency per link, a bandwidth-limited
// uplink per node, and regions with latency between them (what gossip-sim's --latency lognormal,
// --bandwidth and --topology set).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "net/memory/memory_transport.hpp"

using namespace gossiptrain::net;
using namespace std::chrono_literals;

namespace {

// Arrival times of the messages a node receives.
struct Arrivals : TransportHandler {
  explicit Arrivals(SimTransport& t) : t(t) { t.set_handler(this); }
  void on_connection(const ConnectionPtr&, bool) override {}
  void on_message(const ConnectionPtr&, std::uint8_t, Bytes&&) override { at.push_back(t.now()); }
  void on_closed(const ConnectionPtr&, const CloseCause&) override {}
  SimTransport& t;
  std::vector<Millis> at;
};

std::string addr(std::size_t i) { return "10.0.0." + std::to_string(i) + ":7000"; }

// Nodes 0..n-1 with a recorder each.
struct Net {
  explicit Net(SimOptions o, std::size_t n) : net(std::move(o)) {
    for (std::size_t i = 0; i < n; ++i) {
      nodes.push_back(&net.add_node(addr(i), "n" + std::to_string(i)));
      rec.push_back(std::make_unique<Arrivals>(*nodes.back()));
    }
  }
  // The one-way time of a message from a to b on a fresh connection, sent at once.
  Millis one_way(std::size_t a, std::size_t b, std::size_t bytes = 1) {
    ConnectionPtr c;
    nodes[a]->connect(addr(b), [&](ConnectionPtr x, const CloseCause&) { c = x; });
    net.run_until_idle();
    REQUIRE(c);
    const Millis sent = net.now();
    const std::size_t before = rec[b]->at.size();
    REQUIRE(c->send(1, std::make_shared<Bytes>(bytes)));
    net.run_until_idle();
    REQUIRE(rec[b]->at.size() == before + 1);
    return rec[b]->at.back() - sent;
  }
  SimNetwork net;
  std::vector<SimTransport*> nodes;
  std::vector<std::unique_ptr<Arrivals>> rec;
};

}  // namespace

TEST_CASE("sim network: log-normal links have the given median and spread, fixed per link",
          "[net]") {
  SimOptions o;
  o.latency = 40ms;
  o.latency_sigma = 0.5;
  Net n(o, 201);
  std::vector<double> logs;
  for (std::size_t b = 1; b <= 200; ++b) {
    const Millis d = n.one_way(0, b);
    CHECK(n.one_way(0, b) == d);  // the same link twice: the same latency
    CHECK(n.one_way(b, 0) == d);  // and both ways
    logs.push_back(std::log(double(d.count())));
  }
  std::sort(logs.begin(), logs.end());
  const double median = std::exp((logs[99] + logs[100]) / 2);
  double mean = 0, var = 0;
  for (double x : logs) mean += x / logs.size();
  for (double x : logs) var += (x - mean) * (x - mean) / (logs.size() - 1);
  // 200 draws: the sample median and spread are within about 10% of the model's.
  CHECK(median == Approx(40).epsilon(0.15));
  CHECK(std::sqrt(var) == Approx(0.5).epsilon(0.15));
}

TEST_CASE("sim network: a node's uplink sends its messages one after another at its rate",
          "[net]") {
  SimOptions o;
  o.latency = 5ms;
  o.uplink_bytes_per_s = 1e6;  // 1 MB/s: 125,000 bytes take 125 ms
  Net n(o, 3);
  CHECK(n.one_way(0, 1, 124999) == 130ms);  // 125,000 bytes with the type byte, then 5 ms
  ConnectionPtr c01, c02;
  n.nodes[0]->connect(addr(1), [&](ConnectionPtr x, const CloseCause&) { c01 = x; });
  n.nodes[0]->connect(addr(2), [&](ConnectionPtr x, const CloseCause&) { c02 = x; });
  n.net.run_until_idle();
  const Millis t0 = n.net.now();
  for (int i = 0; i < 4; ++i) REQUIRE(c01->send(1, std::make_shared<Bytes>(124999)));
  REQUIRE(c02->send(1, std::make_shared<Bytes>(124999)));  // queued behind the four
  n.net.run_until_idle();
  REQUIRE(n.rec[1]->at.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(n.rec[1]->at[1 + i] - t0 == Millis(125 * (i + 1) + 5));
  REQUIRE(n.rec[2]->at.size() == 1);
  CHECK(n.rec[2]->at[0] - t0 == 630ms);
  // Another node's uplink is its own.
  CHECK(n.one_way(1, 2, 124999) == 130ms);
}

TEST_CASE("sim network: regions add their latency to the links between them", "[net]") {
  SimOptions o;
  o.latency = 2ms;
  o.region_of = {0, 0, 1, 2};
  o.region_ms = {{0, 50, 100}, {50, 0, 30}, {100, 30, 0}};
  Net n(o, 5);  // node 4: not listed, region 0
  CHECK(n.one_way(0, 1) == 2ms);
  CHECK(n.one_way(0, 2) == 52ms);
  CHECK(n.one_way(2, 0) == 52ms);
  CHECK(n.one_way(1, 3) == 102ms);
  CHECK(n.one_way(2, 3) == 32ms);
  CHECK(n.one_way(4, 0) == 2ms);
}

TEST_CASE("sim network: a bad link model is refused", "[net]") {
  auto refused = [](SimOptions o) {
    CHECK_THROWS_AS(SimNetwork(std::move(o)), std::invalid_argument);
  };
  SimOptions o;
  o.latency_sigma = -1;
  refused(o);
  o = {};
  o.uplink_bytes_per_s = -5;
  refused(o);
  o = {};
  o.region_ms = {{0, 1}, {1}};  // not square
  refused(o);
  o = {};
  o.region_ms = {{0, 1}, {1, 0}};
  o.region_of = {0, 2};  // no region 2
  refused(o);
  o.region_of = {0, 1};
  CHECK_NOTHROW(SimNetwork(o));
}
