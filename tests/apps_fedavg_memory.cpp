// The FedAvg server and clients (apps/fedavg) over the seeded in-memory transport: the protocol
// speaks only to net::Transport, so the rounds run here without sockets, and each round's global
// model is checked to be exactly the sample-weighted mean of the models the clients sent.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "apps/fedavg/fedavg.hpp"
#include "apps/fedavg/wire.hpp"
#include "core/metrics.hpp"
#include "kernels/backend.hpp"
#include "net/memory/memory_transport.hpp"
#include "tests/core_test_util.hpp"

using namespace gossiptrain;
namespace fedavg = gossiptrain::apps::fedavg;

namespace {

// A Transport that hands everything to another and keeps a copy of each message received, so the
// test sees what the server got (updates) and what a client got (tasks) without touching them.
class Recorder final : public net::Transport, public net::TransportHandler {
 public:
  explicit Recorder(net::Transport& inner) : inner_(inner) {}

  void set_handler(net::TransportHandler* h) override {
    handler_ = h;
    inner_.set_handler(this);
  }
  net::Scheduler& scheduler() override { return inner_.scheduler(); }
  const std::string& local_id() const override { return inner_.local_id(); }
  const std::string& listen_addr() const override { return inner_.listen_addr(); }
  const std::string& advertised_addr() const override { return inner_.advertised_addr(); }
  void connect(const std::string& addr, ConnectCallback done) override {
    inner_.connect(addr, std::move(done));
  }
  net::BufferPool& buffers() override { return inner_.buffers(); }

  void on_connection(const net::ConnectionPtr& c, bool inbound) override {
    handler_->on_connection(c, inbound);
  }
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override {
    {
      std::lock_guard lk(mu_);
      received_.push_back({type, payload});
    }
    handler_->on_message(c, type, std::move(payload));
  }
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override {
    handler_->on_closed(c, reason);
  }

  // The messages of one type received so far, in order.
  std::vector<net::Bytes> received(fedavg::MsgType type) {
    std::lock_guard lk(mu_);
    std::vector<net::Bytes> out;
    for (const auto& [t, b] : received_)
      if (t == std::uint8_t(type)) out.push_back(b);
    return out;
  }

 private:
  net::Transport& inner_;
  net::TransportHandler* handler_ = nullptr;
  std::mutex mu_;
  std::vector<std::pair<std::uint8_t, net::Bytes>> received_;
};

// Rows [from, from + n) of d.
core::Dataset rows(const core::Dataset& d, std::size_t from, std::size_t n) {
  core::Dataset out;
  out.features = d.features;
  out.classes = d.classes;
  out.x.assign(d.x.begin() + std::ptrdiff_t(from * std::size_t(d.features)),
               d.x.begin() + std::ptrdiff_t((from + n) * std::size_t(d.features)));
  out.y.assign(d.y.begin() + std::ptrdiff_t(from), d.y.begin() + std::ptrdiff_t(from + n));
  return out;
}

// One participant: its flags, data, backend, metrics (written nowhere) and thread's exit code.
struct Party {
  apps::PeerConfig cfg;
  core::ShardData data;
  std::unique_ptr<kernels::Backend> be = kernels::make_backend("cpu");
  core::Metrics metrics{"", "test"};
  int code = -1;
};

apps::PeerConfig tiny_config(int rounds) {
  apps::PeerConfig cfg;
  cfg.train.model = "mlp:12-10-4";
  cfg.train.batch = 8;
  cfg.train.lr = 0.1f;
  cfg.train.eval_each_epoch = false;
  cfg.fedavg.rounds = rounds;
  cfg.fedavg.local_steps = 3;
  cfg.fedavg.min_clients = 3;
  cfg.fedavg.min_clients_timeout_s = 60;
  cfg.fedavg.round_timeout_s = 60;  // every client answers: nobody is dropped
  cfg.fedavg.client_wait_s = 60;
  return cfg;
}

}  // namespace

TEST_CASE("fedavg over the in-memory transport: each round's global model is the weighted mean",
          "[apps]") {
  constexpr int kRounds = 3;
  const std::vector<std::size_t> shard_rows{60, 100, 40};  // unequal: the weights matter
  const core::Dataset all = core::test::tiny_dataset();

  net::SimNetwork net(net::SimOptions{.seed = 5, .latency = net::Millis(2)});
  Party server_party;
  server_party.cfg = tiny_config(kRounds);
  server_party.cfg.fedavg.server = true;
  server_party.data.shard = rows(all, 0, 8);  // the server trains nothing: its evaluator's data
  server_party.data.test = all;
  std::vector<std::unique_ptr<Party>> clients;
  for (std::size_t i = 0, from = 0; i < shard_rows.size(); from += shard_rows[i++]) {
    auto p = std::make_unique<Party>();
    p->cfg = tiny_config(kRounds);
    p->cfg.fedavg.server_addr = "server:7000";
    p->cfg.shard = int(i);
    p->cfg.num_shards = int(shard_rows.size());
    p->data.shard = rows(all, from, shard_rows[i]);
    p->data.test = all;
    clients.push_back(std::move(p));
  }

  std::atomic<bool> stop{false};
  fedavg::Server server(server_party.cfg, *server_party.be, server_party.data, server_party.metrics,
                        stop);
  Recorder server_wire(net.add_node("server:7000", "5e7e7"));
  server.attach(server_wire);
  std::vector<std::unique_ptr<fedavg::Client>> roles;
  std::vector<std::unique_ptr<Recorder>> client_wires;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    Party& p = *clients[i];
    roles.push_back(std::make_unique<fedavg::Client>(p.cfg, *p.be, p.data, p.metrics, stop));
    REQUIRE(roles.back()->fingerprint() == server.fingerprint());
    client_wires.push_back(std::make_unique<Recorder>(
        net.add_node("client" + std::to_string(i) + ":7000", "c1e47" + std::to_string(i))));
    roles.back()->attach(*client_wires.back());
  }
  const std::vector<float> initial = server.global_model();

  // The network runs on its own thread, the protocol's, at about the pace of the wall clock (the
  // server and the clients wait in wall-clock time); the server and each client on theirs.
  std::atomic<bool> done{false};
  std::thread network([&] {
    while (!done.load()) {
      net.run_for(net::Millis(1));
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::vector<std::thread> threads;
  threads.emplace_back([&] { server_party.code = server.run(); });
  for (std::size_t i = 0; i < clients.size(); ++i)
    threads.emplace_back([&, i] { clients[i]->code = roles[i]->run(); });
  // A bound instead of a hang: past it every role is told to stop, and the checks below fail.
  std::thread watchdog([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!done.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop = true;
  });
  for (auto& t : threads) t.join();
  done = true;
  watchdog.join();
  network.join();

  CHECK(server_party.code == 0);
  for (const auto& p : clients) CHECK(p->code == 0);

  // What the server received, round by round: every client's update, each whole and valid.
  std::map<std::uint64_t, std::vector<fedavg::Update>> updates;
  for (const auto& b : server_wire.received(fedavg::MsgType::Update)) {
    std::string why;
    auto u = fedavg::decode_update(b, server.num_params(), &why);
    REQUIRE(u);
    updates[u->round].push_back(std::move(*u));
  }
  REQUIRE(updates.size() == std::size_t(kRounds));
  // What the first client was given: round r's task carries the global model after round r - 1.
  std::vector<fedavg::Task> tasks;
  for (const auto& b : client_wires[0]->received(fedavg::MsgType::Task)) {
    std::string why;
    auto t = fedavg::decode_task(b, server.num_params(), &why);
    REQUIRE(t);
    tasks.push_back(std::move(*t));
  }
  REQUIRE(tasks.size() == std::size_t(kRounds));
  CHECK(tasks[0].params == initial);

  for (int r = 0; r < kRounds; ++r) {
    INFO("round " << r);
    const auto& us = updates[std::uint64_t(r)];
    REQUIRE(us.size() == clients.size());
    CHECK(tasks[std::size_t(r)].round == std::uint64_t(r));
    std::multiset<std::uint64_t> samples;
    for (const auto& u : us) samples.insert(u.samples);
    CHECK(samples == std::multiset<std::uint64_t>(shard_rows.begin(), shard_rows.end()));
    // The mean, computed here on its own: in double, weighted by the samples each client claimed.
    std::vector<float> mean(initial.size());
    double total = 0.0;
    for (const auto& u : us) total += double(u.samples);
    for (std::size_t k = 0; k < mean.size(); ++k) {
      double acc = 0.0;
      for (const auto& u : us) acc += double(u.samples) * double(u.params[k]);
      mean[k] = float(acc / total);
    }
    for (const auto& u : us) CHECK(u.params != tasks[std::size_t(r)].params);  // it trained
    const std::vector<float>& global =
        r + 1 < kRounds ? tasks[std::size_t(r) + 1].params : server.global_model();
    CHECK(global == mean);
  }
}
