// A FedAvg client: dials the server over the transport it is given, says which shard it trains
// and how many samples it holds, then for each task trains the global model it got on its shard
// and sends the result back. A lost server is redialled for --fedavg-wait.
#include <unistd.h>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "apps/fedavg/fedavg.hpp"
#include "apps/fedavg/wire.hpp"
#include "core/trainer.hpp"

namespace gossiptrain::apps::fedavg {
namespace {

using Clock = std::chrono::steady_clock;
using fedavg::MsgType;

struct Event {
  enum Kind { Connected, ConnectFailed, Message, Closed } kind;
  std::uint8_t type = 0;
  net::Bytes payload;
  std::string reason;
  net::ConnectionPtr conn;
  // When the network thread queued it: the main thread may be training a round meanwhile, and
  // the server's outage is counted from when its connection closed, not from when we looked.
  std::chrono::steady_clock::time_point at{};
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
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override {
    push({Event::Closed, 0, {}, reason.text(), c});  // for the log line and server_lost
  }
  void push(Event e) {
    e.at = std::chrono::steady_clock::now();
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

// Trains one round's task from its global model (FedProx's term when it asks for one) and sends
// the update; false when a stop request ended the training.
bool train_task(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
                core::Metrics& metrics, const std::atomic<bool>& stop, const fedavg::Task& t,
                net::Scheduler& sched, const net::ConnectionPtr& conn, double& train_s) {
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
  sched.post([conn, p] { conn->send(std::uint8_t(MsgType::Update), p); });
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

// The model's size and fingerprint, from a trainer that is never run.
std::pair<std::uint64_t, std::size_t> model_shape(const PeerConfig& cfg, kernels::Backend& be,
                                                  const core::ShardData& data,
                                                  core::Metrics& metrics) {
  core::TrainConfig tc = cfg.train;
  tc.checkpoint_dir.clear();
  core::Trainer probe(be, tc, data.shard, data.test, metrics, nullptr);
  return {probe.model().fingerprint(), probe.model().num_params()};
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

// One client's life: dial the server, say hello, train each task it sends, redial a lost server.
struct Client::Impl {
  Impl(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
       core::Metrics& metrics, const std::atomic<bool>& stop)
      : cfg_(cfg), o_(cfg.fedavg), be_(be), data_(data), metrics_(metrics), stop_(stop) {
    std::tie(fingerprint_, n_params_) = model_shape(cfg, be, data, metrics);
  }

  void attach(net::Transport& transport) {
    if (transport_) throw std::logic_error("fedavg: the client is attached to a transport already");
    transport_ = &transport;
    transport.set_handler(&st_);
  }

  int run() {
    if (!transport_) throw std::logic_error("fedavg: the client runs on no transport");
    while (!stop_.load()) {
      if (seconds_since(last_contact_) > o_.client_wait_s) {
        spdlog::error("fedavg: no server at {} for {:.0f} s ({} dials): giving up (--fedavg-wait)",
                      o_.server_addr, o_.client_wait_s, failed_dials_);
        return 1;
      }
      dial();
      if (const auto code = serve_connection()) return *code;
    }
    return 130;
  }

  // What an event means for the connection being served.
  enum class Next { Stay, Redial, Stop };

  // On the transport's thread, as every call of a Transport.
  void dial() {
    transport_->scheduler().post([this] {
      transport_->connect(o_.server_addr, [this](net::ConnectionPtr c, const net::CloseCause& err) {
        if (c) st_.push({Event::Connected, 0, {}, "", c});
        else st_.push({Event::ConnectFailed, 0, {}, err.text(), nullptr});
      });
    });
  }

  // Handles the events of one dial until the server is lost; an exit code when the run ends.
  std::optional<int> serve_connection() {
    conn_.reset();
    while (!stop_.load()) {
      auto e = st_.pop(std::chrono::milliseconds(200));
      if (!e) continue;
      Next next = Next::Stay;
      if (e->kind == Event::ConnectFailed) {
        next = on_connect_failed(e->reason);
      } else if (e->kind == Event::Connected) {
        on_connected(e->conn);
      } else if (e->kind == Event::Closed) {
        if (e->conn == conn_) next = on_closed(e->reason, e->at);
      } else if (e->conn == conn_) {
        last_contact_ = Clock::now();
        if (e->type == std::uint8_t(MsgType::Done)) return on_done();
        next = on_message(*e);
      }
      if (next == Next::Redial) return std::nullopt;
      if (next == Next::Stop) break;
    }
    return 130;
  }

  // Waits before the next dial (kRedialFirst doubling to kRedialMax, within --fedavg-wait of the
  // last contact); one line per failed dial says when the next is.
  Next on_connect_failed(const std::string& reason) {
    ++failed_dials_;
    const double left = o_.client_wait_s - seconds_since(last_contact_);
    const auto pause = std::min<std::chrono::milliseconds>(
        backoff_, std::chrono::milliseconds(std::int64_t(std::max(0.0, left) * 1000) + 1));
    spdlog::info("fedavg: cannot reach the server {} ({}): dial {} again in {:.2f} s, giving "
                 "up in {:.0f} s",
                 o_.server_addr, reason, failed_dials_ + 1, pause.count() / 1000.0,
                 std::max(0.0, left));
    for (auto until = Clock::now() + pause; !stop_.load() && Clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    backoff_ = std::min(backoff_ * 2, kRedialMax);
    return Next::Redial;
  }

  // Says which shard this client trains and how many samples it holds.
  void on_connected(const net::ConnectionPtr& c) {
    conn_ = c;
    last_contact_ = Clock::now();
    backoff_ = kRedialFirst;
    if (lost_at_) {
      const double away = seconds_since(*lost_at_);
      spdlog::info("fedavg: the server {} is back after {:.1f} s ({} failed dials)",
                   o_.server_addr, away, failed_dials_);
      metrics_.emit("server_back", {{"away_s", away}, {"dials", failed_dials_}});
      lost_at_.reset();
    }
    failed_dials_ = 0;
    fedavg::Hello h{std::uint32_t(cfg_.shard), data_.shard.size()};
    auto p = std::make_shared<const net::Bytes>(fedavg::encode(h));
    transport_->scheduler().post(
        [conn = conn_, p] { conn->send(std::uint8_t(MsgType::Hello), p); });
    spdlog::info("fedavg: joined server {} (shard {}, {} samples)", o_.server_addr, cfg_.shard,
                 data_.shard.size());
  }

  Next on_closed(const std::string& reason, Clock::time_point at) {
    const double late = std::chrono::duration<double>(Clock::now() - at).count();
    spdlog::warn("fedavg: lost the server ({}{}); redialling with backoff for up to {:.0f} s",
                 reason, late >= 0.1 ? fmt::format(", {:.1f} s ago, while training", late) : "",
                 o_.client_wait_s);
    metrics_.emit("server_lost", {{"reason", reason}, {"ago_s", late}});
    last_contact_ = at;
    lost_at_ = at;
    return Next::Redial;
  }

  // The run is over: this client leaves (the server waits for its clients to go).
  int on_done() {
    transport_->scheduler().post(
        [conn = conn_] { conn->close(net::CloseReason::Shutdown, "fedavg: the run is done"); });
    spdlog::info("fedavg: the server is done after {} rounds trained here ({:.1f} s)",
                 rounds_trained_, train_s_);
    metrics_.emit("done", {{"steps", rounds_trained_},
                           {"epochs", rounds_trained_},
                           {"final_test_acc", nullptr},
                           {"best_test_acc", nullptr},
                           {"seconds", train_s_},
                           {"stopped", false}});
    return 0;
  }

  // A task: trained and answered. Anything else closes the connection (its Closed event follows).
  Next on_message(const Event& e) {
    std::string why = "unexpected message type " + std::to_string(e.type);
    std::optional<fedavg::Task> task;
    if (e.type == std::uint8_t(MsgType::Task)) task = fedavg::decode_task(e.payload, n_params_, &why);
    if (!task) {
      spdlog::warn("fedavg: closing the server connection: {}", why);
      transport_->scheduler().post(
          [conn = conn_, why] { conn->close(net::CloseReason::Failed, "fedavg: " + why); });
      return Next::Stay;
    }
    if (test_fault(task->round)) return Next::Stop;
    if (!train_task(cfg_, be_, data_, metrics_, stop_, *task, transport_->scheduler(), conn_,
                    train_s_))
      return Next::Stop;
    ++rounds_trained_;
    return Next::Stay;
  }

  // Test-only faults: crash (exit at once) or stall (never answer, until stopped) on the task of a
  // round; true after a stall.
  bool test_fault(std::uint64_t round) const {
    if (long(round) == crash_round_) {
      spdlog::warn("test fault: crashing in round {} (GT_TEST_FEDAVG_CRASH_ROUND)", round);
      spdlog::default_logger()->flush();
      ::_exit(9);
    }
    if (long(round) != stall_round_) return false;
    spdlog::warn("test fault: stalling in round {} (GT_TEST_FEDAVG_STALL_ROUND)", round);
    while (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return true;
  }

  static constexpr auto kRedialFirst = std::chrono::milliseconds(250);
  static constexpr auto kRedialMax = std::chrono::milliseconds(4000);

  const PeerConfig& cfg_;
  const FedAvgOptions& o_;
  kernels::Backend& be_;
  const core::ShardData& data_;
  core::Metrics& metrics_;
  const std::atomic<bool>& stop_;
  std::uint64_t fingerprint_ = 0;
  std::size_t n_params_ = 0;
  ClientState st_;
  net::Transport* transport_ = nullptr;  // attach()
  net::ConnectionPtr conn_;
  const long crash_round_ = env_round("GT_TEST_FEDAVG_CRASH_ROUND");
  const long stall_round_ = env_round("GT_TEST_FEDAVG_STALL_ROUND");
  Clock::time_point last_contact_ = Clock::now();
  std::int64_t rounds_trained_ = 0;
  double train_s_ = 0.0;
  std::chrono::milliseconds backoff_ = kRedialFirst;
  int failed_dials_ = 0;
  std::optional<Clock::time_point> lost_at_;  // when the server was lost, until it is back
};

Client::Client(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
               core::Metrics& metrics, const std::atomic<bool>& stop)
    : impl_(std::make_unique<Impl>(cfg, be, data, metrics, stop)) {}
Client::~Client() = default;
std::uint64_t Client::fingerprint() const { return impl_->fingerprint_; }
std::size_t Client::num_params() const { return impl_->n_params_; }
void Client::attach(net::Transport& transport) { impl_->attach(transport); }
int Client::run() { return impl_->run(); }

}  // namespace gossiptrain::apps::fedavg
