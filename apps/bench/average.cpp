// gossip-bench average: one complete pairwise exchange over the encrypted TCP channel on loopback
// against the time the same channel needs to carry the same bytes both ways (measured in the same
// run), and the slowdown of real MLP training steps while exchanges are in flight.
//
// A is the peer measured; B stands in for its partner, which in a deployment runs on another
// machine: B's threads run at the lowest priority (nice 19 below this process), so that on one
// machine they take as little as possible from A's training. A's network thread runs --net-nice
// levels below A's training, gossip-peer's default unless given.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/bench/bench.hpp"
#include "apps/bench/blaster.hpp"
#include "apps/common/blas.hpp"
#include "apps/common/options.hpp"
#include "apps/common/wire_flags.hpp"
#include "base/rng.hpp"
#include "base/thread.hpp"
#include "core/cpu_plan.hpp"
#include "core/model.hpp"
#include "gossip/dispatcher.hpp"
#include "gossip/exchange/averager.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/buffer_pool.hpp"
#include "net/secure/identity.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::apps {
namespace {

using bench_average::Blaster;
using bench_average::kBlastData;
using bench_average::kBlastHello;

using Clock = std::chrono::steady_clock;
using net::Millis;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

class StaticDirectory final : public gossip::PeerDirectory {
 public:
  std::vector<gossip::PeerRef> peers;
  std::vector<gossip::PeerRef> live_peers() const override { return peers; }
};


// A real training step of the measured model: a fixed random batch uploaded (as the training loop
// would), forward, backward, SGD momentum.
class TrainStep {
 public:
  TrainStep(core::Mlp& model, kernels::Backend& be, int batch)
      : model_(model), be_(be), batch_(batch), xh_(std::size_t(batch) * model.input_dim()),
        yh_(batch), x_(be, xh_.size()), y_(be, batch), vel_(be, model.num_params()) {
    base::SplitMix64 r(3);
    for (auto& v : xh_) v = float(r.uniform());
    for (auto& v : yh_) v = std::int32_t(r.below(model.num_classes()));
  }
  void operator()() {
    be_.upload(x_.data(), xh_.data(), xh_.size() * sizeof(float));
    be_.upload(y_.data(), yh_.data(), yh_.size() * sizeof(std::int32_t));
    model_.forward_backward(x_.data(), y_.data(), batch_);
    be_.sgd_momentum(model_.params(), model_.grads(), vel_.data(), model_.num_params(), 1e-5f,
                     0.9f, 0.0f);
  }

 private:
  core::Mlp& model_;
  kernels::Backend& be_;
  int batch_;
  std::vector<float> xh_;
  std::vector<std::int32_t> yh_;
  kernels::DeviceBuffer<float> x_;
  kernels::DeviceBuffer<std::int32_t> y_;
  kernels::DeviceBuffer<float> vel_;
};

// Mean ms of `steps` training steps, per round, after a warm-up round.
std::vector<double> time_steps_alone(TrainStep& step, int steps, int rounds) {
  std::vector<double> out;
  for (int round = -1; round < rounds; ++round) {  // round -1 warms up
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    if (round >= 0) out.push_back(ms_since(t0) / steps);
  }
  return out;
}

struct Node {
  std::unique_ptr<net::TcpTransport> transport;
  gossip::Dispatcher dispatcher;
  StaticDirectory directory;
  kernels::CpuBackend backend;
  std::unique_ptr<gossip::Averager> averager;
  std::unique_ptr<Blaster> blaster;
  std::mutex mu;
  std::vector<gossip::ExchangeEvent> events;
  std::int64_t step = 0;

  std::size_t event_count() {
    std::lock_guard<std::mutex> lk(mu);
    return events.size();
  }
  void hook(float* params, std::size_t n, bool done) {
    core::StepContext ctx{backend, params, n, step, 0, 0, 0, done};
    averager->between_steps(ctx);
  }
};

// Hidden width H of mlp:784-H-H-10 whose parameter count is closest to n.
int hidden_for(std::size_t n) {
  const double b = 784 + 10 + 2;  // H^2 + (784 + 1 + 1 + 10) H + 10 = n
  return std::max(1, static_cast<int>(std::lround((-b + std::sqrt(b * b + 4.0 * double(n))) / 2)));
}

struct AverageBenchOptions {
  std::size_t params = 25'000'000;
  gossip::WireFormat wire = gossip::WireFormat::Fp32;
  int reps = 7, train_steps = 20, train_rounds = 5, batch = 64, net_nice = kDefaultNetNice;
  double train_max_rate_mb = 0;
  bool json = false, train = true, direct = true;
  std::string mix = "plain";  // clipped: the robust mixing gossip-peer uses by default
  int net_cores = -1, compute_threads = 0;  // gossip-peer's defaults (core::plan_cpus)
};

const OptionTable<AverageBenchOptions>& average_options() {
  using T = AverageBenchOptions;
  using O = Options<T>;
  static const auto table = bench_table<T>(
      "one line of JSON (default: indented)",
      {
          O::number("params", "N", "about N parameters (default 25M = 100 MB fp32)", &T::params,
                    1000, 2'000'000'000),
          O::named<gossip::WireFormat>("wire", wire_values(), "encoding on the wire (default fp32)",
                                       &T::wire),
          O::number("reps", "R", "exchanges and channel transfers timed (default 7)", &T::reps, 1,
                    1000),
          O::number("train-steps", "S", "training steps per round (default 20)", &T::train_steps, 1,
                    100000),
          O::number("train-rounds", "K", "training rounds (default 5)", &T::train_rounds, 1, 1000),
          O::number("batch", "B", "minibatch size of the training steps (default 64)", &T::batch, 1,
                    1 << 20),
          O::flag("no-train", "skip the training part", &T::train, false),
          O::number("net-nice", "N",
                    "A's network thread N nice levels below its training (default 0)", &T::net_nice,
                    0, 19),
          {"train-max-rate", "MB_PER_S",
           "cap on the bytes per second each peer sends in the training part (gossip-peer "
           "--max-rate; "
           "default 0: none)",
           [](T& o, const std::string& v) {
             o.train_max_rate_mb = to_max_rate_mb("train-max-rate", v);
           }},
          O::flag("no-direct", "copy both vectors into their own buffers for the mix, as on a GPU",
                  &T::direct, false),
          O::choice("mix", {"plain", "clipped"}, "the averager's mixing (default plain)", &T::mix),
          {"net-cores", "K|auto", "gossip-peer's --net-cores (default auto)",
           [](T& o, const std::string& v) {
             o.net_cores = int(to_int_or("net-cores", v, "auto", -1, 0, 1024));
           }},
          {"compute-threads", "N|auto", "gossip-peer's --compute-threads (default auto)",
           [](T& o, const std::string& v) {
             o.compute_threads = int(to_int_or("compute-threads", v, "auto", 0, 1, 1024));
           }},
      });
  return table;
}

constexpr const char* kAbout =
    "Two peers on loopback over the encrypted TCP channel, CPU backend. The model is\n"
    "mlp:784-H-H-10 with H chosen so it has about N parameters (default 25M = 100 MB fp32).\n"
    "1. R complete exchanges (request, both snapshots streamed, validated, mixed) against R\n"
    "   transfers of the same bytes both ways on the same channel alone: efficiency =\n"
    "   channel time / exchange time (fastest of each, rounds interleaved).\n"
    "2. K rounds of S training steps alone, then S steps of A with --gossip-every 1 (an\n"
    "   exchange in flight from the first step boundary on, back to back) and more steps,\n"
    "   starting none, until the last one is applied: slowdown = mean step time (hook\n"
    "   included) with gossip / alone (and the median of the per-round ratios, steadier\n"
    "   on a shared machine). Defaults S = 20, K = 5. --train-max-rate caps the bytes\n"
    "   per second each peer sends in this part (gossip-peer --max-rate): each exchange\n"
    "   then spans more steps, the same CPU spread thinner.\n"
    "B, A's partner, stands in for another machine: its threads run at nice 19. A's\n"
    "network thread runs --net-nice N levels below A's training (default 0, as\n"
    "gossip-peer's). Both still share this machine's cores.\n"
    "--net-cores / --compute-threads: gossip-peer's core plan (default auto: from 8\n"
    "cores on, training and BLAS pinned to all but max(2, cores/8) cores, the network\n"
    "threads, A's and B's, to those). The training part also times steps alone on\n"
    "every core (BLAS on all, nothing pinned), the fastest a step can be here.\n"
    "--no-direct: copy both vectors into their own buffers for the mix, as on a GPU,\n"
    "instead of reading them from the chunk messages (the CPU backend's default).\n";

// Polls pred every 0.2 ms; false when limit_ms passes first.
template <class Pred>
bool wait_for(Pred&& pred, double limit_ms) {
  const auto t0 = Clock::now();
  while (!pred()) {
    if (ms_since(t0) > limit_ms) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// The two peers, A measured and B its partner, their model, and the figures.
class AverageBench {
 public:
  AverageBench(const AverageBenchOptions& o, gossip::WireFormat wire, core::CpuPlan plan,
               std::vector<int> all_cpus)
      : o_(o),
        wire_(wire),
        plan_(std::move(plan)),
        all_cpus_(std::move(all_cpus)),
        blas_default_(kernels::blas_threads()),
        spec_("mlp:784-" + std::to_string(hidden_for(o.params)) + "-" +
              std::to_string(hidden_for(o.params)) + "-10"),
        model_(a_.backend, spec_, o.batch) {
    model_.init(1);
    n_ = model_.num_params();
  }

  int run() {
    time_fastest_alone();
    apply_plan(true);
    init_partner_weights();
    start_nodes();
    start_partner();
    nlohmann::json j = header();
    int rc = 0;
    try {
      measure_exchanges(j);
      if (o_.train) j["train"] = measure_training();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gossip-bench average: %s\n", e.what());
      rc = 1;
    }
    stop_.store(true);
    partner_.join();
    a_.transport->stop();
    b_.transport->stop();
    if (rc == 0) std::printf("%s\n", o_.json ? j.dump().c_str() : j.dump(2).c_str());
    return rc;
  }

 private:
  // Before any network thread exists: pin_all_threads reaches this thread and the BLAS pool only.
  void apply_plan(bool planned) {  // planned: the core plan; else every core, unpinned
    const int threads = planned ? plan_.blas_threads : int(all_cpus_.size());
    if (threads > 0) kernels::set_blas_threads(threads);
    else if (blas_default_ > 0) kernels::set_blas_threads(blas_default_);
    base::pin_all_threads(planned && !plan_.compute.empty() ? plan_.compute : all_cpus_);
  }

  // The fastest a step is here: BLAS on every core, nothing pinned, no exchange.
  void time_fastest_alone() {
    if (!o_.train || (plan_.compute.empty() && plan_.blas_threads <= 0)) return;
    apply_plan(false);
    TrainStep step(model_, a_.backend, o_.batch);
    alone_all_ = time_steps_alone(step, o_.train_steps, o_.train_rounds);
  }

  // B starts from A's initial weights plus a little noise, as the peers of a swarm do (the same
  // --seed): with unrelated vectors clipped mixing would refuse the exchange as anomalous (beyond
  // our own norm in the warm-up), which is not the exchange this measures.
  void init_partner_weights() {
    xb_ = kernels::DeviceBuffer<float>(b_.backend, n_);
    std::vector<float> h(n_);
    a_.backend.download(h.data(), model_.params(), n_ * sizeof(float));
    base::SplitMix64 r(2);
    for (auto& v : h) v += float(r.uniform() - 0.5) * 0.01f;
    b_.backend.upload(xb_.data(), h.data(), n_ * sizeof(float));
  }

  gossip::AveragerConfig averager_config() const {
    gossip::AveragerConfig cfg;
    cfg.gossip_every = 1;
    cfg.wire = wire_;
    cfg.direct = o_.direct;
    cfg.robust.mix = o_.mix == "clipped" ? gossip::MixMode::Clipped : gossip::MixMode::Plain;
    cfg.fingerprint = model_.fingerprint();
    return cfg;
  }

  void start_nodes() {
    const gossip::AveragerConfig cfg = averager_config();
    payload_ = gossip::encoded_size(wire_, n_);
    for (std::size_t off = 0; off < payload_; off += cfg.chunk_bytes)
      sizes_.push_back(gossip::kChunkHeaderBytes + std::min(cfg.chunk_bytes, payload_ - off));
    for (Node* node : {&a_, &b_}) {
      net::TcpTransportConfig tc;
      tc.listen = "127.0.0.1:0";
      tc.identity = std::make_shared<const net::Identity>(net::Identity::generate());
      tc.model_fingerprint = model_.fingerprint();
      tc.thread_nice = node == &a_ ? o_.net_nice : 19;
      tc.thread_cpus = plan_.net;
      node->transport = std::make_unique<net::TcpTransport>(tc);
      node->averager = std::make_unique<gossip::Averager>(cfg, *node->transport, node->dispatcher,
                                                          node->directory, node->backend);
      node->averager->set_event_callback([node](const gossip::ExchangeEvent& e) {
        std::lock_guard<std::mutex> lk(node->mu);
        node->events.push_back(e);
      });
      node->blaster = std::make_unique<Blaster>(*node->transport, sizes_);
      node->dispatcher.add(kBlastHello, kBlastData, node->blaster.get());
      node->transport->set_handler(&node->dispatcher);
      node->transport->start();
    }
    a_.directory.peers = {{b_.transport->local_id(), b_.transport->listen_addr()}};
    b_.directory.peers = {{a_.transport->local_id(), a_.transport->listen_addr()}};
  }

  // B's "training loop" is done and lingers, serving exchanges every millisecond.
  void start_partner() {
    partner_ = std::thread([this] {
      std::string err;
      if (!base::lower_this_thread_priority(19, &err))
        spdlog::warn("bench average: partner thread keeps its priority: {}", err);
      base::pin_this_thread(plan_.net);
      while (!stop_.load()) {
        b_.hook(xb_.data(), n_, true);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }

  nlohmann::json header() const {
    return {{"subject", "average"},
            {"params", n_},
            {"model", spec_},
            {"cpus", std::thread::hardware_concurrency()},
            {"loadavg_1m_before", loadavg()},
            {"wire", std::string(gossip::wire_name(wire_))},
            {"direct", o_.direct},
            {"mix", o_.mix},
            {"net_nice", o_.net_nice},
            {"partner_nice", 19},
            {"cpu_plan", plan_.describe()},
            {"blas_threads", kernels::blas_threads()},
            {"payload_bytes_each_way", payload_},
            {"chunk_messages", sizes_.size()}};
  }

  gossip::ExchangeEvent a_last() {
    std::lock_guard<std::mutex> la(a_.mu);
    return a_.events.back();
  }

  // Steps A's idle training loop (a step boundary every millisecond) until the exchange started
  // at the first one has ended on A, and on B unless A's attempt failed.
  void run_exchange_steps(std::size_t ea, std::size_t eb, Clock::time_point t0) {
    ++a_.step;
    a_.hook(model_.params(), n_, false);
    auto finished = [&] {
      if (a_.event_count() == ea) return false;
      return b_.event_count() != eb || !a_last().ok;
    };
    while (!finished()) {
      if (ms_since(t0) > 120000)
        throw std::runtime_error(
            "exchange did not finish in 120 s (A: " + std::to_string(a_.event_count() - ea) +
            " events, B: " + std::to_string(b_.event_count() - eb) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      a_.hook(model_.params(), n_, true);
    }
  }

  // One exchange: from A's step boundary that starts it to both sides having applied the mix.
  // B answers BUSY while it still winds up the previous exchange: that attempt ends with an
  // event on A alone, and is retried (a few times) rather than waited on.
  double exchange() {
    for (int attempt = 0;; ++attempt) {
      const std::size_t ea = a_.event_count(), eb = b_.event_count();
      const auto t0 = Clock::now();
      run_exchange_steps(ea, eb, t0);
      const double ms = ms_since(t0);
      const gossip::ExchangeEvent ev = a_last();
      if (!ev.ok && ev.failure.kind == gossip::ExchangeFailure::Busy && attempt < 20) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      std::lock_guard<std::mutex> la(a_.mu), lb(b_.mu);
      if (!a_.events.back().ok || b_.events.size() == eb || !b_.events.back().ok)
        throw std::runtime_error("exchange failed: " + a_.events.back().reason() + " / " +
                                 (b_.events.size() > eb ? b_.events.back().reason() : "no event"));
      return ms;
    }
  }

  // The same bytes both ways on the reference connection, nothing else.
  double channel() {
    const auto t0 = Clock::now();
    a_.blaster->reset();
    b_.blaster->reset();
    a_.blaster->start();
    b_.blaster->start();
    if (!wait_for([&] { return a_.blaster->done() && b_.blaster->done(); }, 120000))
      throw std::runtime_error("reference transfer did not finish in 120 s: A " +
                               a_.blaster->progress() + "; B " + b_.blaster->progress());
    return ms_since(t0);
  }

  void measure_exchanges(nlohmann::json& j) {
    a_.blaster->dial(b_.transport->listen_addr());
    if (!wait_for([&] { return a_.blaster->ready() && b_.blaster->ready(); }, 10000))
      throw std::runtime_error("reference connection not established");
    exchange();  // warm-up: dedicated connection, first-touch of every buffer
    channel();
    std::vector<double> ex_ms, ch_ms;
    // Each measurement starts with the machine quiet: after an exchange both peers take a
    // standing snapshot at their next idle step boundary, which must not land in the next run.
    auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); };
    for (int r = 0; r < o_.reps; ++r) {
      settle();
      ch_ms.push_back(channel());
      settle();
      ex_ms.push_back(exchange());
    }
    // The fastest of each (rounds interleaved): a load that comes and goes slows both or neither.
    const double ex = *std::min_element(ex_ms.begin(), ex_ms.end());
    const double ch = *std::min_element(ch_ms.begin(), ch_ms.end());
    j["exchange_ms_median"] = median(ex_ms);
    j["channel_ms_median"] = median(ch_ms);
    std::vector<double> paired;  // each exchange against the channel run just before it
    for (int r = 0; r < o_.reps; ++r) paired.push_back(ch_ms[r] / ex_ms[r]);
    j["efficiency_paired_median"] = median(paired);
    j["exchange_ms"] = ex;
    j["channel_ms"] = ch;
    j["exchange_ms_all"] = ex_ms;
    j["channel_ms_all"] = ch_ms;
    j["channel_mb_per_s_each_way"] = double(payload_) / 1e6 / (ch / 1000.0);
    j["efficiency"] = ch / ex;
    j["efficiency_goal"] = 0.8;
  }

  // The training part's figures over its rounds.
  struct TrainRounds {
    std::vector<double> alone, during, round_ratio;
    std::size_t steps_in_flight = 0, steps_with_gossip = 0, finishing_steps = 0;
    double lost_ms = 0;  // step time with gossip beyond the same steps at the round's alone pace
  };

  // S steps alone, then S steps that start an exchange whenever none is in flight, then more
  // steps, starting none, until the last one is applied: all of its work overlaps timed steps.
  void train_round(TrainStep& step, TrainRounds& t) {
    const int steps = o_.train_steps;
    double a_ms = 0, d_ms = 0;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      step();
      a_ms += ms_since(t0);
    }
    int d_steps = 0;
    const auto round_start = Clock::now();
    for (int s = 0; s < steps || a_.averager->in_exchange(); ++s) {
      if (ms_since(round_start) > 600000) throw std::runtime_error("exchange did not finish");
      const auto t0 = Clock::now();
      step();
      ++a_.step;
      if (a_.averager->in_exchange()) ++t.steps_in_flight;
      a_.hook(model_.params(), n_, s >= steps);  // gossip_every = 1; "done": start none
      d_ms += ms_since(t0);
      ++d_steps;
      if (s >= steps) ++t.finishing_steps;
    }
    t.steps_with_gossip += std::size_t(d_steps);
    t.alone.push_back(a_ms / steps);
    t.during.push_back(d_ms / d_steps);
    t.lost_ms += d_ms - t.alone.back() * d_steps;
    t.round_ratio.push_back(t.during.back() / t.alone.back());
  }

  // Real training steps of the same model on A's thread, alone and with exchanges in flight.
  nlohmann::json measure_training() {
    TrainStep step(model_, a_.backend, o_.batch);
    step();  // warm-up
    TrainRounds t;
    const std::size_t ok_before = a_.averager->stats().ok;
    for (Node* node : {&a_, &b_}) node->averager->set_max_rate(o_.train_max_rate_mb * 1e6);
    for (int round = 0; round < o_.train_rounds; ++round) train_round(step, t);
    const std::size_t exchanges = a_.averager->stats().ok - ok_before;
    const double alone = mean(t.alone), during = mean(t.during);
    const double alone_all = alone_all_.empty() ? alone : mean(alone_all_);
    return {
        {"batch", o_.batch},
        {"max_rate_mb_per_s", o_.train_max_rate_mb},
        {"rounds", o_.train_rounds},
        {"steps_per_round", o_.train_steps},
        {"step_ms_alone", alone},
        {"step_ms_with_gossip", during},
        {"slowdown", during / alone},
        {"step_ms_alone_all_cores", alone_all},
        {"slowdown_vs_fastest_alone", during / std::min(alone, alone_all)},
        {"slowdown_median_of_rounds", median(t.round_ratio)},
        {"slowdown_goal", 1.1},
        {"steps_with_exchange_in_flight", t.steps_in_flight},
        {"steps_with_gossip", t.steps_with_gossip},
        {"steps_finishing_the_last_exchange", t.finishing_steps},
        {"exchanges_completed", exchanges},
        {"training_ms_lost_per_exchange", t.lost_ms / double(std::max<std::size_t>(1, exchanges))},
        {"note", "B stands in for a remote partner (nice 19) but shares these cores"}};
  }

  const AverageBenchOptions& o_;
  const gossip::WireFormat wire_;
  const core::CpuPlan plan_;
  const std::vector<int> all_cpus_;
  const int blas_default_;
  const std::string spec_;
  Node a_, b_;
  core::Mlp model_;
  std::size_t n_ = 0;
  std::vector<double> alone_all_;  // step ms on every core, nothing pinned; empty: not measured
  kernels::DeviceBuffer<float> xb_;
  std::size_t payload_ = 0;
  std::vector<std::size_t> sizes_;
  std::atomic<bool> stop_{false};
  std::thread partner_;
};

int run(const Args& args) {
  AverageBenchOptions o;
  if (auto rc = parse_bench_args("average", average_options(), args, o, kAbout)) return *rc;
  // Its training runs on the CPU backend: on the kernels a peer would run (may run this again).
  settle_blas_core("auto");
  const gossip::WireFormat wire = o.wire;
  if (!std::getenv("GT_BENCH_TRACE")) spdlog::set_level(spdlog::level::warn);
  else spdlog::set_level(spdlog::level::trace);
  core::CpuPlan plan;
  const std::vector<int> all_cpus = core::allowed_cpus();
  try {
    plan =
        core::plan_cpus(all_cpus, o.net_cores, o.compute_threads, core::physical_cores(all_cpus));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gossip-bench average: %s\n", e.what());
    return 2;
  }
  AverageBench bench(o, wire, plan, all_cpus);
  return bench.run();
}

}  // namespace

GT_BENCH_SUBJECT("average", "one pairwise exchange over the encrypted channel vs the channel alone", run);

}  // namespace gossiptrain::apps
