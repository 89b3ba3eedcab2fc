// Test harness for the averaging exchange: N peers on the seeded in-memory network, each with a
// Dispatcher, a static peer directory, an Averager and a parameter vector on the CPU backend, and
// a fake "training loop" that calls the hooks once per virtual millisecond.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gossip/exchange/averager.hpp"
#include "gossip/dispatcher.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/memory/memory_transport.hpp"

namespace gossiptrain::gossip::avgtest {

using net::Millis;

// What the exchange tests start from: an exchange at every step boundary, one fingerprint.
inline AveragerConfig base_config() {
  AveragerConfig cfg;
  cfg.gossip_every = 1;
  cfg.fingerprint = 0xfeedbeef;
  cfg.transfer_timeout_floor = Millis(2000);  // keeps failure cases short on the virtual clock
  return cfg;
}

class StaticDirectory final : public PeerDirectory {
 public:
  std::vector<PeerRef> peers;
  // Members known but not live (dead, left): in the schedule's list, never asked.
  std::vector<std::string> gone;
  std::vector<PeerRef> live_peers() const override { return peers; }
  std::vector<std::string> member_ids() const override {
    std::vector<std::string> ids = gone;
    for (const auto& p : peers) ids.push_back(p.id);
    return ids;
  }
};

// One node's network side: its address and id, its transport on the simulated network, the
// dispatcher its handlers hang on, and the peers it knows.
struct SimNode {
  std::string addr, id;
  net::SimTransport* t = nullptr;
  Dispatcher disp;
  StaticDirectory dir;

  // Joins net at `address` as `name`, with the dispatcher as its transport's handler.
  void attach(net::SimNetwork& net, std::string address, std::string name) {
    addr = std::move(address);
    id = std::move(name);
    t = &net.add_node(addr, id);
    t->set_handler(&disp);
  }
};

struct SimPeer : SimNode {
  std::unique_ptr<Averager> avg;
  kernels::DeviceBuffer<float> x;
  std::int64_t step = 0;
  std::int64_t shard = 0;
  bool paused = false;  // its training loop is stuck: the hook is not called
  std::int64_t total_steps = 0;  // the run's length its steps report (0: not known)
  std::vector<ExchangeEvent> events;

  void hook(kernels::Backend& be, bool done) {
    core::StepContext ctx{be, x.data(), x.size(), step, 0, shard, 0, done};
    ctx.total_steps = total_steps;
    avg->between_steps(ctx);
  }
  // One training step's boundary: the step counter advances, so the averager may start an exchange.
  void step_hook(kernels::Backend& be) {
    ++step;
    hook(be, false);
  }
  std::vector<float> values(kernels::Backend& be) const {
    std::vector<float> v(x.size());
    be.download(v.data(), x.data(), x.bytes());
    return v;
  }
};

class Cluster {
 public:
  // per_peer, when given, adjusts peer i's config (a plain or faulty peer among others).
  Cluster(int n, std::size_t d, AveragerConfig cfg, std::uint64_t seed, net::SimOptions opts = {},
          const std::function<void(int, AveragerConfig&)>& per_peer = {})
      : net(with_seed(opts, seed)) {
    std::mt19937_64 rng(seed * 7919 + 1);
    std::normal_distribution<float> N(0.0f, 1.0f);
    for (int i = 0; i < n; ++i) {
      auto p = std::make_unique<SimPeer>();
      p->attach(net, "10.0.0." + std::to_string(i + 1) + ":7000", "peer-" + std::to_string(i));
      AveragerConfig c = cfg;
      c.seed = seed * 1000 + static_cast<std::uint64_t>(i) + 1;
      if (per_peer) per_peer(i, c);
      p->avg = std::make_unique<Averager>(c, *p->t, p->disp, p->dir, be);
      SimPeer* raw = p.get();
      p->avg->set_event_callback([raw](const ExchangeEvent& e) { raw->events.push_back(e); });
      p->x = kernels::DeviceBuffer<float>(be, d);
      std::vector<float> v(d);
      for (auto& f : v) f = N(rng);
      be.upload(p->x.data(), v.data(), v.size() * sizeof(float));
      peers.push_back(std::move(p));
    }
    for (auto& p : peers)
      for (auto& q : peers)
        if (p != q) p->dir.peers.push_back({q->id, q->addr});
  }

  SimPeer& operator[](std::size_t i) { return *peers[i]; }
  std::size_t size() const { return peers.size(); }

  // Every live, unpaused peer passes a step boundary with training done (serves, never starts).
  void serve_all() {
    for (auto& p : peers)
      if (!p->paused && p->t->alive()) p->hook(be, true);
  }

  // Advances the virtual clock one millisecond at a time, calling tick (default: serve_all) after
  // each, until pred holds (true) or limit passes (false).
  bool run_until(const std::function<bool()>& pred, Millis limit,
                 const std::function<void()>& tick = {}) {
    const Millis end = net.now() + limit;
    while (net.now() < end) {
      if (pred()) return true;
      net.run_for(Millis(1));
      if (tick) tick();
      else serve_all();
    }
    return pred();
  }

  // No peer has an exchange in flight.
  bool none_in_exchange() const {
    for (auto& p : peers)
      if (p->avg->in_exchange()) return false;
    return true;
  }

  // Trains for `limit`: peer i takes a step whenever (now + i * phase) % step_ms == 0 (virtual
  // ms) and serves in between. Then lets the exchanges in flight finish without starting new ones
  // (within 5 s).
  void train_then_settle(Millis limit, std::int64_t step_ms, std::int64_t phase) {
    auto train = [&] {
      const std::int64_t now = net.now().count();
      for (std::size_t i = 0; i < size(); ++i) {
        if ((now + static_cast<std::int64_t>(i) * phase) % step_ms == 0) peers[i]->step_hook(be);
        else peers[i]->hook(be, true);
      }
    };
    run_until([] { return false; }, limit, train);
    run_until([&] { return none_in_exchange(); }, Millis(5000));
  }

  std::size_t events() const {
    std::size_t k = 0;
    for (auto& p : peers) k += p->events.size();
    return k;
  }
  std::size_t ok_events() const {
    std::size_t k = 0;
    for (auto& p : peers)
      for (auto& e : p->events) k += e.ok ? 1 : 0;
    return k;
  }

  std::vector<std::vector<float>> all_values() {
    std::vector<std::vector<float>> v;
    for (auto& p : peers) v.push_back(p->values(be));
    return v;
  }

  // Mean over peers of the mean squared distance (per coordinate) to the average vector.
  static double msd(const std::vector<std::vector<float>>& v) {
    const std::size_t n = v.size(), d = v[0].size();
    double total = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      double mean = 0.0;
      for (std::size_t k = 0; k < n; ++k) mean += v[k][j];
      mean /= static_cast<double>(n);
      for (std::size_t k = 0; k < n; ++k) total += (v[k][j] - mean) * (v[k][j] - mean);
    }
    return total / static_cast<double>(n * d);
  }
  static std::vector<double> coordinate_sums(const std::vector<std::vector<float>>& v) {
    std::vector<double> s(v[0].size(), 0.0);
    for (auto& x : v)
      for (std::size_t j = 0; j < x.size(); ++j) s[j] += x[j];
    return s;
  }

  kernels::CpuBackend be;  // declared before the peers: their buffers are freed through it
  net::SimNetwork net;
  std::vector<std::unique_ptr<SimPeer>> peers;

 private:
  static net::SimOptions with_seed(net::SimOptions o, std::uint64_t seed) {
    o.seed = seed;
    return o;
  }
};

}  // namespace gossiptrain::gossip::avgtest
