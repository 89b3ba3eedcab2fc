// gossip::Node over the in-memory transport: the node that ties training to the protocols needs
// no sockets, only a net::Transport (gossip-peer runs it over TCP through apps::PeerNode).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics.hpp"
#include "gossip/node/node.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/memory/memory_transport.hpp"
#include "tests/sim_pump.hpp"

using namespace gossiptrain;

namespace {

// The metric lines a node emits (from its protocol thread and the caller's).
struct Lines : core::MetricSink {
  void on_metric(double, const std::string& event, const nlohmann::json& f) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(event);
    fields.push_back(f);
  }
  std::vector<nlohmann::json> of(const std::string& event) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<nlohmann::json> out;
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i] == event) out.push_back(fields[i]);
    return out;
  }
  std::mutex mu;
  std::vector<std::string> events;
  std::vector<nlohmann::json> fields;
};

// The simulated network on its own thread, 5 simulated ms a pass.
struct Pump : gt_test::SimPump {
  explicit Pump(net::SimNetwork& net) : SimPump(net, net::Millis(5)) {}
};

}  // namespace

TEST_CASE("gossip::Node runs over the in-memory transport: a joiner and its seed see each other "
          "live, say so in member lines, and leave",
          "[gossip][node]") {
  net::SimNetwork net;
  net::SimTransport& ta = net.add_node("10.0.0.1:7000", "pa");
  net::SimTransport& tb = net.add_node("10.0.0.2:7000", "pb");
  Pump pump(net);
  kernels::CpuBackend be_a, be_b;
  core::Metrics ma("", "pa"), mb("", "pb");
  Lines la, lb;
  ma.add_sink(&la);
  mb.add_sink(&lb);
  gossip::NodeConfig ca;
  ca.fingerprint = 5;
  gossip::NodeConfig cb = ca;
  cb.membership.seeds = {"10.0.0.1:7000"};
  bool started_a = false;
  gossip::Node a(ta, ca, be_a, ma, [&] { started_a = true; });
  CHECK(started_a);  // the owner's transport is started before the protocols are built
  gossip::Node b(tb, cb, be_b, mb, [] {});
  a.start();
  b.start();
  const std::atomic<bool> never{false};
  CHECK(b.wait_for_members(2, 20.0, never));
  CHECK(a.wait_for_members(2, 20.0, never));
  CHECK_FALSE(b.join_refused());
  const auto b_heard = lb.of("member");
  REQUIRE_FALSE(b_heard.empty());
  CHECK(b_heard.front()["member"] == "pa");
  CHECK(b_heard.front()["addr"] == "10.0.0.1:7000");
  CHECK(b_heard.front()["state"] == "alive");
  const auto waited = lb.of("min_peers");
  REQUIRE(waited.size() == 1);
  CHECK(waited[0]["ok"] == true);
  CHECK(b.stats().ok == 0);  // no step was taken: no exchange
  b.leave();
  // a hears b's leave and says so in a member line.
  auto saw_left = [&] {
    for (const auto& m : la.of("member"))
      if (m["member"] == "pb" && m["state"] == "left") return true;
    return false;
  };
  for (int i = 0; i < 500 && !saw_left(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(saw_left());
  a.leave();
}
