// gossip-bench rate: exchanges per second against steps per second, for peers whose steps are
// much faster than an exchange (a GPU's: well under a millisecond). N peers on loopback, each a
// gossip::Node with gossip-peer's defaults over the encrypted TCP transport, with the NIID-Bench
// CNN's parameter count; each training thread stands in for a fast training step by a fixed
// short sleep (or busy wait), so what is measured is the exchange path: its rate, the steps per
// exchange, the BUSY answers and --max-lag's waits, and where one exchange's time goes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "apps/bench/bench.hpp"
#include "apps/common/node_config.hpp"
#include "apps/common/options.hpp"
#include "base/rng.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
#include "gossip/node/node.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/secure/crypto.hpp"
#include "net/secure/frame.hpp"
#include "net/secure/identity.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::apps {
namespace {

using Clock = std::chrono::steady_clock;
namespace crypto = net::crypto;

// NIID-Bench's CNN as docs/fedavg.md and scripts/experiments/niid-device.sh run it.
constexpr const char* kNiidCnn = "cnn:28x28x1-c6k5-p2-c16k5-p2-f120-f84-10";

struct RateBenchOptions {
  std::string model = kNiidCnn;
  int peers = 2;
  double step_us = 200;
  std::string step = "sleep";  // sleep | spin
  double seconds = 10, warmup_s = 2;
  int gossip_every = 4;
  int max_lag = -1;  // -1: a GPU's auto (gossip_every); 0: off
  double max_lag_share = 0.25;
  std::string path = "copy";  // copy (a GPU's) | direct (the CPU backend's)
  std::string mix = "clipped";
  bool json = false;
};

const OptionTable<RateBenchOptions>& rate_options() {
  using T = RateBenchOptions;
  using O = Options<T>;
  static const auto table = bench_table<T>(
      "one line of JSON (default: indented)",
      {
          O::text("model", "SPEC", "the model whose parameters are exchanged (the default: NIID-Bench's CNN)",
                  &T::model),
          O::number("peers", "N", "peers on loopback", &T::peers, 2, 64),
          O::number("step-us", "US", "one training step, simulated, in microseconds",
                    &T::step_us, 0, 1e6),
          O::choice("step", {"sleep", "spin"},
                    "a step sleeps (the CPU free, as while a GPU computes) or spins",
                    &T::step),
          O::number("seconds", "S", "measured time", &T::seconds, 0.5, 3600),
          O::number("warmup", "S", "time before the measurement", &T::warmup_s, 0, 600),
          O::number("gossip-every", "K", "gossip-peer's --gossip-every",
                    &T::gossip_every, 1, 100000),
          O::number_or("max-lag", "N", "gpu", -1,
                       "gossip-peer's --max-lag in steps, 0: off (gpu: --gossip-every, its auto on "
                       "a GPU)",
                       &T::max_lag, 0, 1000000),
          O::number("max-lag-share", "X", "gossip-peer's --max-lag-share",
                    &T::max_lag_share, 0, 1000),
          O::choice("path", {"copy", "direct"},
                    "the averager's buffers: copy, as on a GPU (s and r copied, the partner's "
                    "chunks taken in at step boundaries), or direct, the CPU backend's",
                    &T::path),
          O::choice("mix", {"plain", "clipped"}, "the averager's mixing (clipped: gossip-peer's)",
                    &T::mix),
      });
  return table;
}

constexpr const char* kAbout =
    "N peers (gossip::Node, gossip-peer's defaults: --gossip-every 4, clipped mixing, --max-lag\n"
    "as on a GPU, --max-lag-share 0.25) on loopback over the encrypted TCP channel, exchanging\n"
    "a vector of the model's parameter count (default NIID-Bench's CNN). Each training thread\n"
    "stands in for a fast step by --step-us of sleep (the CPU free, as while a GPU computes) or\n"
    "spin, moves a few of its parameters, and calls the node's step hook. After --warmup,\n"
    "--seconds are measured: steps and exchanges per second per peer, steps per exchange, BUSY\n"
    "answers, --max-lag's waits and deferrals, the hook's time per step, and where an exchange's\n"
    "time goes (microseconds from its start, medians over the measured exchanges, by role; the\n"
    "AEAD's part: the same bytes sealed and opened alone).\n";

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Peer {
  kernels::CpuBackend backend;
  std::unique_ptr<net::TcpTransport> transport;
  std::unique_ptr<core::Metrics> metrics;
  std::unique_ptr<gossip::Node> node;
  std::vector<float> params;
  std::thread thread;
  std::mutex mu;  // events (protocol thread) and the counters read while it runs
  std::vector<gossip::ExchangeEvent> events;
  std::atomic<std::int64_t> steps{0};
  std::atomic<double> hook_s{0};
};

// The figures of one peer at one moment (the measurement is the difference of two).
struct Counts {
  std::int64_t steps = 0;
  double hook_s = 0, lag_wait_s = 0;
  std::uint64_t ok = 0, averaging = 0, failed = 0, busy = 0, busy_sent = 0, held = 0, lag_waits = 0,
                deferred = 0;
  std::size_t events = 0;
};

Counts counts(Peer& p) {
  Counts c;
  c.steps = p.steps.load();
  c.hook_s = p.hook_s.load();
  const gossip::AveragerStats s = p.node->stats();
  c.ok = s.ok;
  c.averaging = s.averaging;
  c.failed = s.failed;
  const auto it = s.failed_by_reason.find("busy");
  c.busy = it == s.failed_by_reason.end() ? 0 : it->second;
  c.busy_sent = s.busy_sent;
  c.held = s.held;
  // Written by the training thread: read between its steps is good enough for a count.
  c.lag_waits = p.node->lag_waits();
  c.lag_wait_s = p.node->lag_wait_s();
  c.deferred = p.node->lag_deferred();
  std::lock_guard<std::mutex> lk(p.mu);
  c.events = p.events.size();
  return c;
}

// Microseconds to seal and to open `bytes` in frames of max_frame, with the AEAD the channel
// picks here (the fastest of 5 runs each).
std::pair<double, double> aead_us(std::size_t bytes, std::size_t max_frame, crypto::Aead aead) {
  crypto::SymKey key;
  crypto::random_bytes(key.span());
  crypto::AeadCipher c(aead, key);
  std::uint8_t ad[net::kFrameHeaderBytes] = {};
  const std::size_t frames = (bytes + max_frame - 1) / max_frame;
  net::Bytes plain(bytes, 1), sealed(bytes + frames * crypto::kAeadTagBytes), back(bytes);
  double seal = 1e30, open = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (std::size_t i = 0, off = 0; i < frames; ++i, off += max_frame) {
      const std::size_t len = std::min(max_frame, bytes - off);
      std::uint8_t* o = sealed.data() + off + i * crypto::kAeadTagBytes;
      c.seal(o, o + len, plain.data() + off, len, ad, i);
    }
    seal = std::min(seal, seconds_since(t0) * 1e6);
    t0 = Clock::now();
    for (std::size_t i = 0, off = 0; i < frames; ++i, off += max_frame) {
      const std::size_t len = std::min(max_frame, bytes - off);
      const std::uint8_t* in = sealed.data() + off + i * crypto::kAeadTagBytes;
      if (!c.open(back.data() + off, in, len, in + len, ad, i))
        throw std::runtime_error("aead: decryption failed");
    }
    open = std::min(open, seconds_since(t0) * 1e6);
  }
  return {seal, open};
}

// Medians of the phases of the ok exchanges of one role, in microseconds.
nlohmann::json phases(const std::vector<gossip::ExchangeEvent>& evs, gossip::ExchangeRole role) {
  std::vector<double> rtt, accepted, own_sent, received, vote_wait, voted, peer_voted, committed,
      apply_wait, total, busy;
  for (const auto& e : evs) {
    if (!e.ok || e.role != role) continue;
    const gossip::ExchangeTimes& t = e.times;
    if (role == gossip::ExchangeRole::Initiator && t.requested >= 0 && t.accepted >= 0)
      rtt.push_back(t.accepted - t.requested);
    accepted.push_back(t.accepted);
    own_sent.push_back(t.own_sent - t.accepted);
    received.push_back(t.received - t.accepted);
    voted.push_back(t.voted - t.accepted);
    vote_wait.push_back(t.voted - t.received);
    peer_voted.push_back(t.peer_voted - t.accepted);
    committed.push_back(t.committed - t.accepted);
    apply_wait.push_back(t.applied - t.committed);
    total.push_back(t.applied);
    busy.push_back(t.busy);
  }
  nlohmann::json j = {{"exchanges", total.size()}};
  if (total.empty()) return j;
  if (role == gossip::ExchangeRole::Initiator) {
    j["start_to_accept"] = median(accepted);
    j["request_to_accept"] = median(rtt);
    j["busy_answers_mean"] = std::accumulate(busy.begin(), busy.end(), 0.0) / double(busy.size());
  }
  j["accept_to_own_sent"] = median(own_sent);
  j["accept_to_received"] = median(received);
  j["received_to_voted"] = median(vote_wait);
  j["accept_to_voted"] = median(voted);
  j["accept_to_peer_voted"] = median(peer_voted);
  j["accept_to_commit"] = median(committed);
  j["commit_to_applied"] = median(apply_wait);
  j["total"] = median(total);
  return j;
}

class RateBench {
 public:
  explicit RateBench(const RateBenchOptions& o) : o_(o) {}

  int run() {
    kernels::CpuBackend be;
    const core::Model model(be, o_.model, 1);
    n_ = model.num_params();
    fingerprint_ = model.fingerprint();
    std::vector<float> init(n_);
    base::SplitMix64 r(1);
    for (auto& v : init) v = float(r.uniform() - 0.5) * 0.1f;
    const double load = loadavg();
    start_peers(init);
    nlohmann::json j = header(load);
    std::atomic<bool> stop{false};
    for (std::size_t i = 0; i < peers_.size(); ++i)
      peers_[i]->thread = std::thread([this, i, &stop] { train(*peers_[i], int(i), stop); });
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.warmup_s));
    std::vector<Counts> before;
    for (auto& p : peers_) before.push_back(counts(*p));
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.seconds));
    std::vector<Counts> after;
    for (auto& p : peers_) after.push_back(counts(*p));
    const double s = seconds_since(t0);
    stop.store(true);
    for (auto& p : peers_) p->thread.join();
    figures(j, before, after, s);
    for (auto& p : peers_) p->node->leave();
    for (auto& p : peers_) p->transport->stop();
    std::printf("%s\n", o_.json ? j.dump().c_str() : j.dump(2).c_str());
    return 0;
  }

 private:
  void start_peers(const std::vector<float>& init) {
    PeerConfig pc;  // gossip-peer's defaults
    pc.node.averager.gossip_every = o_.gossip_every;
    pc.node.max_lag = o_.max_lag < 0   ? gossip::MaxLag::steps(o_.gossip_every)
                      : o_.max_lag == 0 ? gossip::MaxLag::off()
                                        : gossip::MaxLag::steps(o_.max_lag);
    pc.node.max_lag_share = o_.max_lag_share;
    pc.node.averager.robust.mix =
        o_.mix == "clipped" ? gossip::MixMode::Clipped : gossip::MixMode::Plain;
    std::string seed;
    for (int i = 0; i < o_.peers; ++i) {
      auto p = std::make_unique<Peer>();
      p->params = init;
      base::SplitMix64 r(100 + i);  // a little apart, as peers that trained a few steps
      for (auto& v : p->params) v += float(r.uniform() - 0.5) * 0.001f;
      net::TcpTransportConfig tc;
      tc.listen = "127.0.0.1:0";
      tc.identity = std::make_shared<const net::Identity>(net::Identity::generate());
      tc.model_fingerprint = fingerprint_;
      p->transport = std::make_unique<net::TcpTransport>(tc);
      p->metrics = std::make_unique<core::Metrics>("", "rate" + std::to_string(i));
      gossip::NodeConfig nc = node_config(pc, fingerprint_);
      if (!seed.empty()) nc.membership.seeds = {seed};
      nc.averager.direct = o_.path == "direct";
      Peer* raw = p.get();
      p->node = std::make_unique<gossip::Node>(*p->transport, nc, p->backend, *p->metrics,
                                               [raw] { raw->transport->start(); });
      p->node->set_exchange_observer([raw](const gossip::ExchangeEvent& e) {
        std::lock_guard<std::mutex> lk(raw->mu);
        raw->events.push_back(e);
      });
      if (seed.empty()) seed = p->transport->listen_addr();
      p->node->start();
      peers_.push_back(std::move(p));
    }
    std::atomic<bool> never{false};
    for (auto& p : peers_)
      if (!p->node->wait_for_members(o_.peers, 30, never))
        throw std::runtime_error("the peers did not all meet in 30 s");
  }

  // One peer's training loop: a simulated step, a few parameters moved, the step hook.
  void train(Peer& p, int index, const std::atomic<bool>& stop) {
    const auto step_time = std::chrono::duration<double, std::micro>(o_.step_us);
    constexpr std::size_t kMoved = 256;  // parameters a step moves (a GPU's step moves all)
    std::int64_t step = 0;
    double hook_s = 0;
    while (!stop.load()) {
      const auto t0 = Clock::now();
      if (o_.step == "spin") {
        while (Clock::now() - t0 < step_time) {
        }
      } else if (o_.step_us > 0) {
        std::this_thread::sleep_for(step_time);
      }
      const std::size_t first = std::size_t(step) * kMoved % n_;
      for (std::size_t k = first; k < std::min(n_, first + kMoved); ++k)
        p.params[k] += (index % 2 ? 1e-5f : -1e-5f);
      ++step;
      core::StepContext ctx{p.backend, p.params.data(), n_, step, step * 64, 6000, 0, false};
      const auto h0 = Clock::now();
      p.node->hook().between_steps(ctx);
      hook_s += seconds_since(h0);
      p.steps.store(step);
      p.hook_s.store(hook_s);
    }
  }

  nlohmann::json header(double load) const {
    const crypto::Aead aead = crypto::aes256gcm_available() ? crypto::Aead::Aes256Gcm
                                                            : crypto::Aead::ChaCha20Poly1305;
    const std::size_t bytes = kernels::encoded_size(kernels::Wire::Fp32, n_);
    const auto [seal, open] = aead_us(bytes, net::Limits{}.max_frame_bytes, aead);
    return {{"subject", "rate"},
            {"model", o_.model},
            {"params", n_},
            {"payload_bytes_each_way", bytes},
            {"peers", o_.peers},
            {"step_us", o_.step_us},
            {"step", o_.step},
            {"path", o_.path},
            {"mix", o_.mix},
            {"gossip_every", o_.gossip_every},
            {"max_lag", o_.max_lag < 0 ? o_.gossip_every : o_.max_lag},
            {"max_lag_share", o_.max_lag_share},
            {"seconds", o_.seconds},
            {"cpus", std::thread::hardware_concurrency()},
            {"loadavg_1m_before", load},
            {"aead", crypto::aead_name(aead)},
            {"aead_seal_us", seal},
            {"aead_open_us", open}};
  }

  void figures(nlohmann::json& j, const std::vector<Counts>& b, const std::vector<Counts>& a,
               double s) {
    double steps = 0, ok = 0, averaging = 0, failed = 0, busy = 0, busy_sent = 0, held = 0, waits = 0,
           wait_s = 0, deferred = 0, hook_s = 0;
    std::vector<gossip::ExchangeEvent> evs;
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      steps += double(a[i].steps - b[i].steps);
      ok += double(a[i].ok - b[i].ok);
      averaging += double(a[i].averaging - b[i].averaging);
      failed += double(a[i].failed - b[i].failed);
      busy += double(a[i].busy - b[i].busy);
      busy_sent += double(a[i].busy_sent - b[i].busy_sent);
      held += double(a[i].held - b[i].held);
      waits += double(a[i].lag_waits - b[i].lag_waits);
      wait_s += a[i].lag_wait_s - b[i].lag_wait_s;
      deferred += double(a[i].deferred - b[i].deferred);
      hook_s += a[i].hook_s - b[i].hook_s;
      std::lock_guard<std::mutex> lk(peers_[i]->mu);
      evs.insert(evs.end(), peers_[i]->events.begin() + std::ptrdiff_t(b[i].events),
                 peers_[i]->events.begin() + std::ptrdiff_t(a[i].events));
    }
    const double n = double(peers_.size());
    j["measured_s"] = s;
    // Per peer: each ok exchange counts once on each of its two peers.
    j["steps_per_s"] = steps / n / s;
    j["exchanges_per_s"] = ok / n / s;
    j["steps_per_exchange"] = ok > 0 ? steps / ok : -1;
    j["exchanges_per_step"] = steps > 0 ? ok / steps : 0;
    j["averaging_per_step"] = steps > 0 ? averaging / steps : 0;
    j["failed_per_s"] = failed / n / s;
    j["busy_failures_per_s"] = busy / n / s;  // every partner asked answered BUSY
    j["busy_sent_per_s"] = busy_sent / n / s;
    j["held_per_s"] = held / n / s;  // requests held behind a transfer, then answered
    j["lag_waits_per_s"] = waits / n / s;
    j["lag_wait_share"] = wait_s / n / s;
    j["lag_deferred_per_s"] = deferred / n / s;
    j["hook_us_per_step"] = steps > 0 ? (hook_s - wait_s) / steps * 1e6 : 0;
    j["initiator_us"] = phases(evs, gossip::ExchangeRole::Initiator);
    j["responder_us"] = phases(evs, gossip::ExchangeRole::Responder);
    j["note"] =
        "per peer; an exchange counts on both of its peers. Phases: median microseconds from the "
        "exchange's start (accept_to_*: from the transfer's start); aead_*_us: the payload "
        "alone, once each way per exchange and peer";
  }

  const RateBenchOptions& o_;
  std::size_t n_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::vector<std::unique_ptr<Peer>> peers_;
};

int run(const Args& args) {
  RateBenchOptions o;
  if (auto rc = parse_bench_args("rate", rate_options(), args, o, kAbout)) return *rc;
  if (!std::getenv("GT_BENCH_TRACE")) spdlog::set_level(spdlog::level::warn);
  else spdlog::set_level(spdlog::level::trace);
  RateBench bench(o);
  return bench.run();
}

}  // namespace

GT_BENCH_SUBJECT("rate", "exchanges per second against fast steps (simulated), with a breakdown",
                 run);

}  // namespace gossiptrain::apps
