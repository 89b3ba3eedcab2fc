// A FedAvg client: dials the server over the encrypted channel, says which shard it trains and
// how many samples it holds, then for each task trains the global model it got on its shard and
// sends the result back. A lost server is redialled for --fedavg-wait.
#include <unistd.h>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "apps/common/fedavg.hpp"
#include "apps/common/fedavg_wire.hpp"
#include "apps/common/node.hpp"
#include "core/trainer.hpp"
#include "net/identity.hpp"
#include "net/tcp_transport.hpp"

namespace gossiptrain::apps {
namespace {

using Clock = std::chrono::steady_clock;
using fedavg::MsgType;

struct Event {
  enum Kind { Connected, ConnectFailed, Message, Closed } kind;
  std::uint8_t type = 0;
  net::Bytes payload;
  std::string reason;
  net::ConnectionPtr conn;
};

// The transport's events, queued for the main thread.
class ClientState final : public net::TransportHandler {
 public:
  void on_connection(const net::ConnectionPtr& c, bool inbound) override {
    if (inbound) c->close(net::CloseReason::Refused, "a FedAvg client accepts no connections");
  }
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override {
    push({Event::Message, type, std::move(payload), "", c});
  }
  void on_closed(const net::ConnectionPtr& c, const std::string& reason) override {
    push({Event::Closed, 0, {}, reason, c});
  }
  void push(Event e) {
    std::lock_guard lk(mu_);
    q_.push_back(std::move(e));
    cv_.notify_all();
  }
  // The next event, or nothing after timeout.
  std::optional<Event> pop(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return std::nullopt;
    Event e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

// Round r's data order: the run's seed itself in round 0 (so one client's first round is plain
// local training with --seed), then a mix of seed, shard and round.
std::uint64_t round_seed(std::uint64_t seed, int shard, std::uint64_t round) {
  if (round == 0) return seed;
  std::uint64_t z = seed ^ (0x9E3779B97F4A7C15ull * (round + 1)) ^ (std::uint64_t(shard) << 40);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) & ((1ull << 53) - 1);
}

long env_round(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : -1;
}

}  // namespace

// Trains one round's task from its global model (FedProx's term when it asks for one) and sends
// the update; false when a stop request ended the training.
bool train_task(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
                core::Metrics& metrics, const std::atomic<bool>& stop, const fedavg::Task& t,
                net::TcpTransport& transport, const net::ConnectionPtr& conn, double& train_s) {
  const fedavg::Task* task = &t;
  const auto t0 = Clock::now();
  core::TrainConfig tc = cfg.train;
  tc.checkpoint_dir.clear();
  tc.eval_each_epoch = false;  // the server evaluates the global model
  if (task->local_steps > 0) {
    tc.epochs = 1;
    tc.steps_per_epoch = std::int64_t(task->local_steps);
  } else {
    tc.epochs = int(task->local_epochs);
    tc.steps_per_epoch = 0;  // a pass over this client's own shard
  }
  tc.seed = round_seed(cfg.train.seed, cfg.shard, task->round);
  core::Trainer trainer(be, tc, data.shard, data.test, metrics, nullptr);
  core::Checkpoint c = trainer.state();
  c.params = task->params;
  trainer.restore(c, "the global model of round " + std::to_string(task->round), false);
  trainer.set_proximal(task->params, task->fedprox_mu);
  const core::TrainResult res = trainer.run(stop);
  if (res.stopped) return false;
  fedavg::Update u{task->round, data.shard.size(), trainer.state().params};
  const std::uint64_t fnv = fedavg::params_fnv(u.params);
  auto p = std::make_shared<const net::Bytes>(fedavg::encode(u));
  transport.post([conn, p] { conn->send(std::uint8_t(MsgType::Update), p); });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  train_s += s;
  metrics.emit("update", {{"round", task->round},
                          {"samples", u.samples},
                          {"steps", res.steps},
                          {"seconds", s},
                          {"bytes", p->size()},
                          {"params_fnv", std::to_string(fnv)},
                          {"global_fnv", std::to_string(fedavg::params_fnv(task->params))}});
  spdlog::info("fedavg: round {}: {} steps in {:.1f} s, sent {} bytes", task->round,
               res.steps, s, p->size());
  return true;
}

int run_fedavg_client(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
                      core::Metrics& metrics, const std::atomic<bool>& stop) {
  const FedAvgOptions& o = cfg.fedavg;
  // The model's size and fingerprint, from a trainer that is never run.
  std::uint64_t fingerprint = 0;
  std::size_t n_params = 0;
  {
    core::TrainConfig tc = cfg.train;
    tc.checkpoint_dir.clear();
    core::Trainer probe(be, tc, data.shard, data.test, metrics, nullptr);
    fingerprint = probe.model().fingerprint();
    n_params = probe.model().num_params();
  }
  auto identity =
      std::make_shared<const net::Identity>(net::Identity::load_or_create(cfg.identity));
  metrics.set_peer(identity->peer_id());
  ClientState st;
  net::TcpTransportConfig tcfg = transport_config(cfg, identity, fingerprint, {});
  tcfg.limits.max_message_bytes = fedavg::max_message_bytes(n_params);
  net::TcpTransport transport(std::move(tcfg));
  transport.set_handler(&st);
  transport.start();
  // Test-only faults: crash (exit at once) or stall (never answer) on the task of a round.
  const long crash_round = env_round("GT_TEST_FEDAVG_CRASH_ROUND");
  const long stall_round = env_round("GT_TEST_FEDAVG_STALL_ROUND");

  auto last_contact = Clock::now();
  std::int64_t rounds_trained = 0;
  double train_s = 0.0;
  // Redials of a lost or not yet started server back off (kRedialFirst doubling to kRedialMax),
  // all within --fedavg-wait of the last contact; one line per failed dial says when the next is.
  constexpr auto kRedialFirst = std::chrono::milliseconds(250);
  constexpr auto kRedialMax = std::chrono::milliseconds(4000);
  auto backoff = kRedialFirst;
  int failed_dials = 0;
  std::optional<Clock::time_point> lost_at;  // when the server was lost, until it is back
  while (!stop.load()) {
    const double waited = std::chrono::duration<double>(Clock::now() - last_contact).count();
    if (waited > o.client_wait_s) {
      spdlog::error("fedavg: no server at {} for {:.0f} s ({} dials): giving up (--fedavg-wait)",
                    o.server_addr, o.client_wait_s, failed_dials);
      transport.stop();
      return 1;
    }
    transport.connect(o.server_addr, [&st](net::ConnectionPtr c, const std::string& err) {
      if (c) st.push({Event::Connected, 0, {}, "", c});
      else st.push({Event::ConnectFailed, 0, {}, err, nullptr});
    });
    net::ConnectionPtr conn;
    bool lost = false;
    while (!stop.load() && !lost) {
      auto e = st.pop(std::chrono::milliseconds(200));
      if (!e) continue;
      if (e->kind == Event::ConnectFailed) {
        ++failed_dials;
        const double left =
            o.client_wait_s - std::chrono::duration<double>(Clock::now() - last_contact).count();
        const auto pause = std::min<std::chrono::milliseconds>(
            backoff, std::chrono::milliseconds(std::int64_t(std::max(0.0, left) * 1000) + 1));
        spdlog::info("fedavg: cannot reach the server {} ({}): dial {} again in {:.2f} s, giving "
                     "up in {:.0f} s",
                     o.server_addr, e->reason, failed_dials + 1, pause.count() / 1000.0,
                     std::max(0.0, left));
        for (auto until = Clock::now() + pause; !stop.load() && Clock::now() < until;)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        backoff = std::min(backoff * 2, kRedialMax);
        lost = true;
      } else if (e->kind == Event::Connected) {
        conn = e->conn;
        last_contact = Clock::now();
        backoff = kRedialFirst;
        if (lost_at) {
          const double away = std::chrono::duration<double>(Clock::now() - *lost_at).count();
          spdlog::info("fedavg: the server {} is back after {:.1f} s ({} failed dials)",
                       o.server_addr, away, failed_dials);
          metrics.emit("server_back", {{"away_s", away}, {"dials", failed_dials}});
          lost_at.reset();
        }
        failed_dials = 0;
        fedavg::Hello h{std::uint32_t(cfg.shard), data.shard.size()};
        auto p = std::make_shared<const net::Bytes>(fedavg::encode(h));
        transport.post([conn, p] { conn->send(std::uint8_t(MsgType::Hello), p); });
        spdlog::info("fedavg: joined server {} (shard {}, {} samples)", o.server_addr, cfg.shard,
                     data.shard.size());
      } else if (e->kind == Event::Closed) {
        if (e->conn != conn) continue;
        spdlog::warn("fedavg: lost the server ({}); redialling with backoff for up to {:.0f} s",
                     e->reason, o.client_wait_s);
        metrics.emit("server_lost", {{"reason", e->reason}});
        last_contact = Clock::now();
        lost_at = Clock::now();
        lost = true;
      } else if (e->conn == conn) {
        last_contact = Clock::now();
        if (e->type == std::uint8_t(MsgType::Done)) {
          spdlog::info("fedavg: the server is done after {} rounds trained here ({:.1f} s)",
                       rounds_trained, train_s);
          metrics.emit("done", {{"steps", rounds_trained},
                                {"epochs", rounds_trained},
                                {"final_test_acc", nullptr},
                                {"best_test_acc", nullptr},
                                {"seconds", train_s},
                                {"stopped", false}});
          transport.stop();
          return 0;
        }
        std::string why = "unexpected message type " + std::to_string(e->type);
        std::optional<fedavg::Task> task;
        if (e->type == std::uint8_t(MsgType::Task))
          task = fedavg::decode_task(e->payload, n_params, &why);
        if (!task) {
          spdlog::warn("fedavg: closing the server connection: {}", why);
          transport.post([conn, why] { conn->close(net::CloseReason::Failed, "fedavg: " + why); });
          continue;  // its Closed event follows
        }
        if (long(task->round) == crash_round) {
          spdlog::warn("test fault: crashing in round {} (GT_TEST_FEDAVG_CRASH_ROUND)",
                       task->round);
          spdlog::default_logger()->flush();
          ::_exit(9);
        }
        if (long(task->round) == stall_round) {
          spdlog::warn("test fault: stalling in round {} (GT_TEST_FEDAVG_STALL_ROUND)",
                       task->round);
          while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          break;
        }
        if (!train_task(cfg, be, data, metrics, stop, *task, transport, conn, train_s)) break;
        ++rounds_trained;
      }
    }
  }
  transport.stop();
  return 130;
}

}  // namespace gossiptrain::apps
