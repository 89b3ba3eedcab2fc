// The FedAvg server: clients connect over the transport it is given; each round it samples some,
// sends the global model, waits for their models until the round's deadline and averages those
// that came back whole, weighted by sample counts. The global model and the round are checkpointed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "apps/fedavg/fedavg.hpp"
#include "apps/fedavg/math.hpp"
#include "apps/fedavg/wire.hpp"
#include "base/rng.hpp"
#include "base/short_id.hpp"
#include "core/checkpoint.hpp"
#include "core/trainer.hpp"

namespace gossiptrain::apps::fedavg {
namespace {

using Clock = std::chrono::steady_clock;
using fedavg::MsgType;
constexpr auto kHelloDeadline = std::chrono::milliseconds(10000);

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A connected client.
struct Member {
  net::ConnectionPtr conn;
  bool hello = false;
  fedavg::Hello info;
};

// The transport's events (io thread) and the round loop (main thread) meet here, under mu_.
class ServerState final : public net::TransportHandler {
 public:
  explicit ServerState(std::size_t n_params) : n_params_(n_params) {}
  // The transport's clock and timers: set before it starts.
  void set_scheduler(net::Scheduler& sched) { sched_ = &sched; }

  void on_connection(const net::ConnectionPtr& c, bool inbound) override {
    if (!inbound) {
      c->close(net::CloseReason::Refused, "a FedAvg server dials nobody");
      return;
    }
    {
      std::lock_guard lk(mu_);
      clients_[c.get()].conn = c;
    }
    std::weak_ptr<net::Connection> w = c;
    sched_->schedule(kHelloDeadline, [this, w] {
      auto conn = w.lock();
      if (!conn) return;
      bool late = false;
      {
        std::lock_guard lk(mu_);
        auto it = clients_.find(conn.get());
        late = it != clients_.end() && !it->second.hello;
      }
      if (late) conn->close(net::CloseReason::NoAnswer, "no hello within 10 s");
    });
  }

  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override {
    std::string why;
    if (type == std::uint8_t(MsgType::Hello)) {
      auto h = fedavg::decode_hello(payload, &why);
      bool ok = false;
      if (h) {
        std::lock_guard lk(mu_);
        auto it = clients_.find(c.get());
        if (it != clients_.end() && !it->second.hello) {
          it->second.hello = true;
          it->second.info = *h;
          ok = true;
          cv_.notify_all();
        } else {
          why = "a second hello";
        }
      }
      if (!ok) return refuse(c, why);
      spdlog::info("fedavg: client {} joined (shard {}, {} samples)", base::short_id(c->peer_id()),
                   h->shard, h->samples);
      return;
    }
    if (type == std::uint8_t(MsgType::Update)) {
      const std::size_t bytes = payload.size();
      auto u = fedavg::decode_update(payload, n_params_, &why);
      if (!u) return refuse(c, why);
      std::lock_guard lk(mu_);
      if (u->round != round_ || !asked_.count(c.get()) || answered_.count(c.get()) ||
          dropped_.count(c.get())) {
        // A stalled client answering after its round's deadline: nothing to apply.
        spdlog::info("fedavg: ignoring an update for round {} from {} (round {} open)", u->round,
                     base::short_id(c->peer_id()), round_);
        return;
      }
      bytes_in_ += bytes;
      answered_.emplace(c.get(), std::move(*u));
      cv_.notify_all();
      return;
    }
    refuse(c, "unexpected message type " + std::to_string(type));
  }

  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override {
    std::lock_guard lk(mu_);
    if (asked_.count(c.get()) && !answered_.count(c.get()) && dropped_.insert(c.get()).second)
      spdlog::warn("fedavg: client {} left mid-round {} ({}): dropped from the round",
                   base::short_id(c->peer_id()), round_, reason);
    clients_.erase(c.get());
    cv_.notify_all();
  }

  std::size_t ready_clients() {
    std::lock_guard lk(mu_);
    return count_ready();
  }
  // Waits until pred() (under the lock), the deadline or stop.
  template <class Pred>
  bool wait(Clock::time_point deadline, const std::atomic<bool>& stop, Pred pred) {
    std::unique_lock lk(mu_);
    while (!pred()) {
      if (stop.load() || Clock::now() >= deadline) return false;
      cv_.wait_for(lk, std::chrono::milliseconds(100));
    }
    return true;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<net::Connection*, Member> clients_;
  std::uint64_t round_ = ~0ull;  // the open round
  std::set<net::Connection*> asked_, dropped_;
  std::map<net::Connection*, fedavg::Update> answered_;
  std::uint64_t bytes_in_ = 0;

  std::size_t count_ready() const {
    return std::size_t(std::count_if(clients_.begin(), clients_.end(),
                                     [](const auto& kv) { return kv.second.hello; }));
  }

 private:
  void refuse(const net::ConnectionPtr& c, const std::string& why) {
    spdlog::warn("fedavg: closing {}: {}", base::short_id(c->peer_id()), why);
    c->close(net::CloseReason::Failed, "fedavg: " + why);
  }
  std::size_t n_params_;
  net::Scheduler* sched_ = nullptr;
};

// The clients asked in a round: a seeded draw from the ready ones, ordered by shard then id so
// the draw depends only on (seed, round) and who is there.
std::vector<Member> sample_clients(ServerState& st, const FedAvgOptions& o, std::uint64_t seed,
                                   std::uint64_t round) {
  std::vector<Member> ready;
  {
    std::lock_guard lk(st.mu_);
    for (const auto& [p, c] : st.clients_)
      if (c.hello) ready.push_back(c);
  }
  std::sort(ready.begin(), ready.end(), [](const Member& a, const Member& b) {
    return std::pair(a.info.shard, a.conn->peer_id()) < std::pair(b.info.shard, b.conn->peer_id());
  });
  std::size_t m = o.clients_fraction
                      ? std::size_t(std::llround(o.clients_per_round * double(ready.size())))
                      : std::size_t(o.clients_per_round);
  m = std::clamp<std::size_t>(m, 1, ready.size());
  base::Xoshiro256 rng(seed ^ (0x9E3779B97F4A7C15ull * (round + 1)));
  for (std::size_t i = 0; i < m; ++i)  // partial Fisher-Yates: the first m are the draw
    std::swap(ready[i], ready[i + rng.below(ready.size() - i)]);
  ready.resize(m);
  return ready;
}

struct Global {
  std::uint64_t round = 0;  // rounds applied
  std::vector<float> params, velocity;
  std::string run_id;  // --run-id, or the resumed checkpoint's when none was given
};

void save(const std::string& dir, const Global& g, std::uint64_t fingerprint) {
  core::Checkpoint c;
  c.fingerprint = fingerprint;
  c.step = c.epoch = std::int64_t(g.round);
  c.params = g.params;
  c.opt_state = {g.velocity};
  nlohmann::json meta{{"fedavg_round", g.round}};
  if (!g.run_id.empty()) meta["run_id"] = g.run_id;
  c.meta = meta.dump();
  core::save_checkpoint(dir, c);
}

// The global model: the seeded initial weights (as a peer trained alone would start), or the
// server's checkpoint when there is one (CheckpointError when it is another model's).
Global load_global(const PeerConfig& cfg, const core::Checkpoint& tmpl, std::uint64_t fingerprint,
                   core::Metrics& metrics) {
  const std::size_t n = tmpl.params.size();
  Global g;
  g.params = tmpl.params;
  g.velocity.assign(n, 0.0f);
  g.run_id = cfg.train.run_id;
  const std::string& dir = cfg.train.checkpoint_dir;
  if (dir.empty() || !core::checkpoint_exists(dir)) return g;
  core::Checkpoint c = core::load_checkpoint(dir);  // CheckpointError: the caller says it
  if (c.fingerprint != fingerprint || c.params.size() != n || c.opt_state.size() != 1 ||
      c.opt_state[0].size() != n || c.step < 0)
    throw core::CheckpointError("checkpoint in " + dir + " is not a FedAvg server's of model " +
                                cfg.train.model);
  // The run it belongs to, judged as a gossip peer's checkpoint is.
  g.run_id = core::resumed_run_id(
      "checkpoint in " + dir,
      core::checkpoint_run_id(nlohmann::json::parse(c.meta, nullptr, false)), g.run_id);
  g.round = std::uint64_t(c.step);
  g.params = std::move(c.params);
  g.velocity = std::move(c.opt_state[0]);
  spdlog::info("fedavg: resumed at round {} from {}", g.round, dir);
  metrics.emit("resume", {{"round", g.round}, {"dir", dir}});
  return g;
}

// Opens round g.round for the chosen clients and sends each the task (the global model); a client
// whose send queue refuses it is dropped at once. The task's bytes.
std::shared_ptr<const net::Bytes> ask_clients(ServerState& st, net::Scheduler& sched,
                                              const std::vector<Member>& chosen, const Global& g,
                                              const FedAvgOptions& o) {
  fedavg::Task task;
  task.round = g.round;
  task.local_epochs = std::uint32_t(o.local_epochs);
  task.local_steps = std::uint64_t(o.local_steps);
  task.fedprox_mu = float(o.fedprox_mu);
  task.params = g.params;
  auto payload = std::make_shared<const net::Bytes>(fedavg::encode(task));
  {
    std::lock_guard lk(st.mu_);
    st.round_ = g.round;
    st.asked_.clear();
    st.dropped_.clear();
    st.answered_.clear();
    st.bytes_in_ = 0;
    for (const auto& c : chosen) st.asked_.insert(c.conn.get());
  }
  sched.post([&st, chosen, payload] {
    for (const auto& c : chosen) {
      if (c.conn->send(std::uint8_t(MsgType::Task), payload)) continue;
      std::lock_guard lk(st.mu_);
      st.dropped_.insert(c.conn.get());
      st.cv_.notify_all();
    }
  });
  return payload;
}

// The server's `done` line and its last log line.
void report_server_done(core::Metrics& metrics, const Global& g,
                        const std::optional<core::EvalResult>& last,
                        const std::optional<double>& best, double seconds, bool stopped) {
  auto or_null = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  metrics.emit("done", {{"steps", g.round},
                        {"epochs", g.round},
                        {"rounds", g.round},
                        {"final_test_acc", or_null(last ? std::optional(last->acc) : std::nullopt)},
                        {"best_test_acc", or_null(best)},
                        {"seconds", seconds},
                        {"stopped", stopped}});
  spdlog::info("fedavg server {} after {} rounds, {:.1f} s", stopped ? "stopped" : "done", g.round,
               seconds);
}

// What a round did, for its metric line.
struct RoundFigures {
  std::size_t asked, answered, dropped, clients;
  std::uint64_t bytes_out, bytes_in;
  double seconds;
};

// The round's `round` and `eval` metric lines and its log line.
void report_round(core::Metrics& metrics, const Global& g, const FedAvgOptions& o,
                  const RoundFigures& f, const core::EvalResult& ev) {
  metrics.emit("round", {{"round", g.round},
                         {"asked", f.asked},
                         {"answered", f.answered},
                         {"dropped", f.dropped},
                         {"clients", f.clients},
                         {"bytes_sent", f.bytes_out},
                         {"bytes_received", f.bytes_in},
                         {"seconds", f.seconds},
                         {"global_fnv", std::to_string(fedavg::params_fnv(g.params))}});
  metrics.emit("eval", {{"epoch", g.round},
                        {"step", g.round},
                        {"round", g.round},
                        {"test_acc", ev.acc},
                        {"test_loss", ev.loss}});
  spdlog::info("round {}/{}: {} asked, {} answered, {} dropped, {:.1f} s: test_acc {:.2f}%",
               g.round, o.rounds, f.asked, f.answered, f.dropped, f.seconds, 100.0 * ev.acc);
}

// Tells every client the run is over, and gives them a moment to leave: stopping the transport
// drops what its send queues still hold.
void say_done(ServerState& st, net::Scheduler& sched, const std::atomic<bool>& stop) {
  sched.post([&st] {
    static const auto empty = std::make_shared<const net::Bytes>();
    std::lock_guard lk(st.mu_);
    for (const auto& [p, c] : st.clients_) c.conn->send(std::uint8_t(MsgType::Done), empty);
  });
  st.wait(Clock::now() + std::chrono::seconds(5), stop, [&] { return st.clients_.empty(); });
}

// Closes the round: the answers in, the rest dropped (a late answer is ignored).
void close_round(ServerState& st, std::map<net::Connection*, fedavg::Update>& answers,
                 std::size_t& dropped, std::uint64_t& bytes_in) {
  std::lock_guard lk(st.mu_);
  answers = std::move(st.answered_);
  st.answered_.clear();
  for (auto* c : st.asked_)
    if (!answers.count(c)) st.dropped_.insert(c);
  dropped = st.dropped_.size();
  bytes_in = st.bytes_in_;
  st.round_ = ~0ull;
  st.asked_.clear();
}

Clock::time_point after_s(double seconds) {
  return Clock::now() + std::chrono::milliseconds(std::int64_t(seconds * 1000));
}

}  // namespace

// The server's run: the global model, its evaluator, the transport's events and the rounds.
struct Server::Impl {
  Impl(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
       core::Metrics& metrics, const std::atomic<bool>& stop)
      : cfg_(cfg),
        o_(cfg.fedavg),
        data_(data),
        metrics_(metrics),
        stop_(stop),
        evaluator_(be, evaluator_config(cfg), data.shard, data.test, metrics, nullptr),
        fingerprint_(evaluator_.model().fingerprint()),
        tmpl_(evaluator_.state()),
        g_(load_global(cfg, tmpl_, fingerprint_, metrics)),
        st_(tmpl_.params.size()) {}

  void attach(net::Transport& transport) {
    if (transport_) throw std::logic_error("fedavg: the server is attached to a transport already");
    transport_ = &transport;
    st_.set_scheduler(transport.scheduler());
    transport.set_handler(&st_);
  }

  int run() {
    if (!transport_) throw std::logic_error("fedavg: the server runs on no transport");
    announce();
    const auto t_start = Clock::now();
    wait_first_clients();
    bool stopped = false;
    while (g_.round < std::uint64_t(o_.rounds)) {
      if (stop_.load()) {
        stopped = true;
        break;
      }
      // No client at all: no progress until one (re)joins; give up after --min-clients-timeout.
      if (!st_.wait(after_s(o_.min_clients_timeout_s), stop_,
                    [&] { return st_.count_ready() > 0; })) {
        if (stop_.load()) continue;
        spdlog::error("fedavg: no client for {:.0f} s at round {}: giving up",
                      o_.min_clients_timeout_s, g_.round);
        return 1;
      }
      if (!play_round()) {
        stopped = true;  // an interrupted round is not applied: it resumes from the checkpoint
        break;
      }
    }
    if (!stopped) finish_rounds();
    report_server_done(metrics_, g_, last_, best_, since(t_start), stopped);
    return stopped ? 130 : 0;
  }

  static core::TrainConfig evaluator_config(const PeerConfig& cfg) {
    core::TrainConfig tc = cfg.train;
    tc.checkpoint_dir.clear();  // the server writes its own checkpoint
    return tc;
  }

  void announce() {
    spdlog::info(
        "fedavg server on {}: {} rounds, clients per round {}{}, {} local {}, mu {}, "
        "server momentum {}",
        transport_->advertised_addr(), o_.rounds, o_.clients_per_round,
        o_.clients_fraction ? " (fraction)" : "",
        o_.local_steps > 0 ? o_.local_steps : o_.local_epochs,
        o_.local_steps > 0 ? "steps" : "epochs", o_.fedprox_mu, o_.server_momentum);
    metrics_.emit("fedavg_server",
                  {{"addr", transport_->advertised_addr()}, {"rounds", o_.rounds}});
  }

  // The first round waits for --min-clients (then goes on with those there are).
  void wait_first_clients() {
    if (g_.round >= std::uint64_t(o_.rounds)) return;
    if (!st_.wait(after_s(o_.min_clients_timeout_s), stop_,
                  [&] { return st_.count_ready() >= std::size_t(o_.min_clients); }))
      if (!stop_.load())
        spdlog::warn("fedavg: {} of --min-clients {} after {:.0f} s; starting with those",
                     st_.ready_clients(), o_.min_clients, o_.min_clients_timeout_s);
  }

  // One round: ask, wait until the deadline, average the answers, checkpoint and evaluate. False
  // when a stop interrupted it (nothing applied).
  bool play_round() {
    const auto t_round = Clock::now();
    std::vector<Member> chosen = sample_clients(st_, o_, cfg_.train.seed, g_.round);
    const auto payload = ask_clients(st_, transport_->scheduler(), chosen, g_, o_);
    const auto deadline =
        t_round + std::chrono::milliseconds(std::int64_t(o_.round_timeout_s * 1000));
    st_.wait(deadline, stop_,
             [&] { return st_.answered_.size() + st_.dropped_.size() >= chosen.size(); });
    std::map<net::Connection*, fedavg::Update> answers;
    std::size_t dropped = 0;
    std::uint64_t bytes_in = 0;
    close_round(st_, answers, dropped, bytes_in);
    if (stop_.load() && answers.size() < chosen.size()) return false;
    if (answers.empty()) {
      spdlog::warn("fedavg: round {}: no client answered ({} dropped); the model is unchanged",
                   g_.round, dropped);
    } else {
      std::vector<fedavg::WeightedModel> ws;
      for (const auto& [c, u] : answers) ws.push_back({u.samples, &u.params});
      fedavg::apply_round(g_.params, g_.velocity, ws, o_.server_momentum);
    }
    ++g_.round;
    if (!cfg_.train.checkpoint_dir.empty()) save(cfg_.train.checkpoint_dir, g_, fingerprint_);
    evaluate_global();
    best_ = std::max(best_.value_or(0.0), last_->acc);
    const RoundFigures f{chosen.size(), answers.size(), dropped, st_.ready_clients(),
                         payload->size() * chosen.size(), bytes_in, since(t_round)};
    report_round(metrics_, g_, o_, f, *last_);
    return true;
  }

  void evaluate_global() {
    core::Checkpoint c = tmpl_;
    c.params = g_.params;
    evaluator_.restore(c, "the global model", /*own=*/false);
    last_ = evaluator_.evaluate(data_.test);
  }

  // Every round done: the clients are told; a server resumed with every round done reports the
  // model it holds.
  void finish_rounds() {
    say_done(st_, transport_->scheduler(), stop_);
    if (last_) return;
    evaluate_global();
    metrics_.emit("eval", {{"epoch", g_.round},
                           {"step", g_.round},
                           {"round", g_.round},
                           {"test_acc", last_->acc},
                           {"test_loss", last_->loss}});
  }

  const PeerConfig& cfg_;
  const FedAvgOptions& o_;
  const core::ShardData& data_;
  core::Metrics& metrics_;
  const std::atomic<bool>& stop_;
  core::Trainer evaluator_;
  const std::uint64_t fingerprint_;
  const core::Checkpoint tmpl_;
  Global g_;
  ServerState st_;
  net::Transport* transport_ = nullptr;  // attach()
  std::optional<core::EvalResult> last_;
  std::optional<double> best_;
};

Server::Server(const PeerConfig& cfg, kernels::Backend& be, const core::ShardData& data,
               core::Metrics& metrics, const std::atomic<bool>& stop)
    : impl_(std::make_unique<Impl>(cfg, be, data, metrics, stop)) {}
Server::~Server() = default;
std::uint64_t Server::fingerprint() const { return impl_->fingerprint_; }
std::size_t Server::num_params() const { return impl_->tmpl_.params.size(); }
void Server::attach(net::Transport& transport) { impl_->attach(transport); }
int Server::run() { return impl_->run(); }
const std::vector<float>& Server::global_model() const { return impl_->g_.params; }

}  // namespace gossiptrain::apps::fedavg
