// gossip-sim's world: gossip-peer's gossip::Node for every peer over one SimNetwork.
// Building the peers, their protocols and events, and the run; the churn is world_churn.cpp, the
// samples and the summary world_summary.cpp.
#include "apps/sim/world.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>

#include "apps/common/node_config.hpp"
#include "apps/sim/peer.hpp"
#include "apps/sim/world_detail.hpp"
#include "base/rng.hpp"

namespace gossiptrain::apps::sim {

using net::Millis;
using nlohmann::json;

namespace {
constexpr std::int8_t kUnseen = -1;
std::string id_of(int i) { return "p" + std::to_string(i); }
// Distinct dialable addresses for up to 2^24 peers.
std::string addr_of(int i) {
  return "10." + std::to_string((i >> 16) & 255) + "." + std::to_string((i >> 8) & 255) + "." +
         std::to_string(i & 255) + ":7000";
}
const char* state_name(gossip::MemberState s) {
  switch (s) {
    case gossip::MemberState::Alive: return "alive";
    case gossip::MemberState::Suspect: return "suspect";
    case gossip::MemberState::Dead: return "dead";
    case gossip::MemberState::Left: return "left";
  }
  return "?";
}
}  // namespace

// The simulated model: its fingerprint in catch-up (every peer holds the same kind of vector).
constexpr std::uint64_t kSimFingerprint = 0x51D0C0DE;

// A peer's whole state for a catch-up server: its vector, no optimizer state but the one vector
// a fetcher with n_opt_state 1 expects (zeros), its step as the counters.
class World::VectorState final : public core::StateSource {
 public:
  VectorState(World& w, Peer& p) : w_(w), p_(p) {}
  core::Checkpoint state() override {
    core::Checkpoint c;
    c.fingerprint = kSimFingerprint;
    c.step = c.samples = p_.step;
    c.params.resize(p_.x.size());
    w_.be_.download(c.params.data(), p_.x.data(), c.params.size() * sizeof(float));
    c.opt_state.emplace_back(c.params.size(), 0.0f);
    return c;
  }

 private:
  World& w_;
  Peer& p_;
};


std::vector<int> Topology::assign(int peers) const {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<int> out(std::size_t(std::max(peers, 0)), 0);
  for (int i = 0; i < peers; ++i) {
    const double at = (double(i) + 0.5) / double(peers) * total;
    double cum = 0;
    int r = 0;
    while (r + 1 < int(weights.size()) && at >= cum + weights[std::size_t(r)])
      cum += weights[std::size_t(r++)];
    out[std::size_t(i)] = r;
  }
  return out;
}

namespace {

// A topology file's error: its path, then what is wrong.
std::invalid_argument bad_topology(const std::string& path, const std::string& what) {
  return std::invalid_argument("'" + path + "': " + what);
}

// "regions": 1 to 64 distinct names, each with a weight > 0 (default 1).
void read_regions(const nlohmann::json& regions, const std::string& path, Topology& t) {
  if (!regions.is_array() || regions.empty() || regions.size() > 64)
    throw bad_topology(path, "\"regions\" must be a list of 1 to 64 regions");
  for (const auto& r : regions) {
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string())
      throw bad_topology(path, "every region needs a \"name\"");
    const std::string name = r["name"];
    if (std::find(t.names.begin(), t.names.end(), name) != t.names.end())
      throw bad_topology(path, "region '" + name + "' is named twice");
    if (r.contains("weight") && !r["weight"].is_number())
      throw bad_topology(path, "region '" + name + "': \"weight\" must be a number");
    const double w = r.contains("weight") ? r["weight"].get<double>() : 1.0;
    if (!(w > 0 && w < 1e9)) throw bad_topology(path, "region '" + name + "': \"weight\" must be > 0");
    t.names.push_back(name);
    t.weights.push_back(w);
  }
}

// "latency_ms": one row per region, one latency in ms in [0, 600000] per region.
void read_latencies(const nlohmann::json& m, const std::string& path, Topology& t) {
  const std::string n = std::to_string(t.names.size());
  if (!m.is_array() || m.size() != t.names.size())
    throw bad_topology(path, "\"latency_ms\" must be a " + n + "x" + n +
                                 " matrix (one row per region)");
  for (const auto& row : m) {
    if (!row.is_array() || row.size() != t.names.size())
      throw bad_topology(path, "every row of \"latency_ms\" needs " + n + " numbers");
    std::vector<double> r;
    for (const auto& x : row) {
      if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() <= 600000))
        throw bad_topology(path, "latencies must be numbers of ms in [0, 600000]");
      r.push_back(x.get<double>());
    }
    t.latency_ms.push_back(std::move(r));
  }
}

}  // namespace

Topology load_topology(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read '" + path + "'");
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("regions") || !j.contains("latency_ms"))
    throw bad_topology(path, "want a JSON object with \"regions\" and \"latency_ms\"");
  Topology t;
  read_regions(j["regions"], path, t);
  read_latencies(j["latency_ms"], path, t);
  return t;
}

World::World(SimConfig cfg, std::ostream& events)
    : cfg_(std::move(cfg)), events_(events), net_([&] {
        net::SimOptions o;
        o.seed = cfg.seed;
        o.latency = cfg.latency;
        o.jitter = cfg.jitter;
        o.latency_sigma = cfg.latency_sigma;
        o.uplink_bytes_per_s = cfg.bandwidth_mbit * 1e6 / 8;
        if (cfg.topology) {
          o.region_of = cfg.topology->assign(cfg.churn ? core::total_peers(*cfg.churn) : cfg.peers);
          o.region_ms = cfg.topology->latency_ms;
        }
        return o;
      }()) {
  if (cfg_.peers < 1) throw std::invalid_argument("gossip-sim: --peers must be >= 1");
  if (cfg_.workload != "consensus" && cfg_.workload != "train")
    throw std::invalid_argument("gossip-sim: --workload is consensus or train");
  // Loss (--loss, and a churn link event's) drops membership messages only: the exchange's bulk
  // transfer would only slow down on a lossy TCP connection, which is not modelled.
  net_.set_loss(cfg_.loss, gossip::kMembershipTypeFirst, gossip::kMembershipTypeLast);
  const int slots = cfg_.churn ? core::total_peers(*cfg_.churn) : cfg_.peers;
  for (int i = 0; i < std::min(cfg_.seeds, cfg_.peers); ++i) seed_addrs_.push_back(addr_of(i));
  base::Xoshiro256 rng(mix64(cfg_.seed, 0xC0FFEE));
  for (int i = 0; i < slots; ++i) {
    auto p = std::make_unique<Peer>();
    p->index = i;
    p->id = id_of(i);
    p->addr = addr_of(i);
    p->view.assign(static_cast<std::size_t>(slots), kUnseen);
    if (!cfg_.train()) {
      p->x = kernels::DeviceBuffer<float>(be_, cfg_.params);
      for (std::size_t j = 0; j < cfg_.params; ++j)
        p->x.data()[j] = static_cast<float>(rng.normal());
    }
    peers_.push_back(std::move(p));
  }
  dim_ = cfg_.params;
  if (cfg_.train()) load_train_data();
  if (cfg_.churn) {
    schedule_ = core::expand_schedule(
        *cfg_.churn, cfg_.sim_seconds > 0 ? cfg_.sim_seconds : 3 * expected_train_s_ + 600);
    // Progress is the share of the simulated time, or of the training's expected length.
    const double span = cfg_.train() ? expected_train_s_ : cfg_.sim_seconds;
    for (auto e : schedule_.by_progress) {
      e.at = e.at * span;
      e.by_progress = false;
      schedule_.timed.push_back(e);
    }
    std::stable_sort(schedule_.timed.begin(), schedule_.timed.end(),
                     [](const auto& a, const auto& b) { return a.at < b.at; });
  }
}

World::~World() {
  for (auto& p : peers_)
    if (p->up) tear_down(*p);
}

double World::now_s() const { return static_cast<double>(net_.now().count()) / 1000.0; }

int World::index_of(const std::string& id) const {
  if (id.size() < 2 || id[0] != 'p') return -1;
  int v = 0;
  for (std::size_t k = 1; k < id.size(); ++k) {
    if (id[k] < '0' || id[k] > '9') return -1;
    v = v * 10 + (id[k] - '0');
    if (v >= static_cast<int>(peers_.size())) return -1;
  }
  return v;
}

int World::view(int observer, int member) const { return peers_.at(observer)->view.at(member); }

int World::up_count() const { return up_; }

void World::set_up(Peer& p, bool up) {
  if (p.up != up) up_ += up ? 1 : -1;
  p.up = up;
}

void World::emit(json j) { events_ << j.dump() << '\n'; }

// The Lifeguard bound gossip-launch reports (launch_churn.cpp detection_bound_s): the longest
// suspicion (no confirmation) plus one probe period, for the initial swarm size.
double World::detection_bound_s() const {
  const gossip::MembershipConfig c;
  const double scale = std::max(1.0, std::log10(double(std::max(1, cfg_.peers))));
  const double min_s = c.suspicion_mult * scale * c.probe_interval.count() / 1000.0;
  return c.suspicion_max_timeout_mult * min_s + c.probe_interval.count() / 1000.0;
}

// ------------------------------------------------------------------------------------------------
// Peers: start, protocols, ticks

// Peer p's gossip::Node, as gossip-peer builds it from the same flags (apps/common/node_config),
// on its simulated transport with NodeThreads::Shared; what only the sim sets: the seeds, the
// seeded draws, the virtual clock's incarnation and the churn's fault.
void World::build_protocols(Peer& p) {
  const int i = p.index;
  gossip::NodeConfig nc;
  if (cfg_.train()) {
    // Training peers average, wait (--max-lag, --max-ahead) and step the outer optimizer as
    // gossip-peer does with the same flags.
    nc = node_config(cfg_.peer, fingerprint_);
  } else {
    // Consensus peers average at every tick; no training to hold back or to pace.
    nc.fingerprint = kSimFingerprint;
    nc.averager.gossip_every = 1;
    nc.averager.robust.mix = cfg_.mix;
    nc.averager.choice = cfg_.peer.node.averager.choice;  // --partner-choice: gossip-peer's code
    nc.averager.choice.exact_passes = true;  // fixed vectors: a pass can be exact
    nc.max_lag = gossip::MaxLag::off();
    nc.max_ahead = 0;
  }
  nc.threads = gossip::NodeThreads::Shared;
  gossip::MembershipConfig& mc = nc.membership;
  mc.seeds = seed_addrs_;
  mc.names = names_;  // one interned copy of each id and address for all the peers' tables
  mc.idle_connection_timeout = ms_of(cfg_.idle_timeout_s);
  // Incarnations from the virtual clock (a real peer uses wall-clock seconds): a restarted peer
  // starts above anything its previous life announced.
  mc.initial_incarnation = static_cast<std::uint64_t>(net_.now().count()) + 1;
  mc.rng_seed = mix64(cfg_.seed, 2 * static_cast<std::uint64_t>(i) + 1 + 0x10000 * p.life);
  gossip::AveragerConfig& ac = nc.averager;
  ac.yield_between_steps = false;
  ac.fault = p.fault;
  ac.seed = mix64(cfg_.seed, 2 * static_cast<std::uint64_t>(i) + 2 + 0x10000 * p.life);
  p.metrics = std::make_unique<core::Metrics>("", p.id);
  p.node = std::make_unique<gossip::Node>(*p.t, nc, train_be_ ? *train_be_ : be_, *p.metrics,
                                          [] {});
  p.node->set_exchange_observer([this, i](const gossip::ExchangeEvent& e) { on_exchange(i, e); });
  p.node->set_member_observer([this, i](const gossip::MemberInfo& m) { on_member(i, m); });
  p.node->averager().set_boundary_request([this, i] {
    Peer& q = *peers_[i];
    if (q.boundary_pending) return;
    q.boundary_pending = true;
    q.t->post([this, i] {
      peers_[i]->boundary_pending = false;
      boundary(i, false);
    });
  });
}

// A joiner takes a live peer's vector before it averages, as gossip-peer does (gossip/catch_up):
// once its membership has joined, it fetches; until the fetch ends it starts no exchange and
// serves none. A failed fetch leaves its own random vector.
void World::catch_up(int i, std::uint64_t life) {
  Peer& p = *peers_[i];
  if (!p.up || p.life != life || !p.catching_up) return;
  if (!p.node->membership().joined()) {
    p.t->schedule(Millis(100), [this, i, life] { catch_up(i, life); });
    return;
  }
  gossip::CatchUpClientConfig cc;
  cc.fingerprint = kSimFingerprint;
  cc.n_params = dim_;
  if (p.trainer) {
    cc.fingerprint = p.trainer->model().fingerprint();
    cc.n_opt_state = p.trainer->optimizer_state_count();
  }
  cc.seed = mix64(cfg_.seed, 0xCA7C00 + static_cast<std::uint64_t>(i) + 0x10000 * p.life);
  const double started = now_s();
  p.node->catch_up_client().start(cc, [this, i, life, started](gossip::CatchUpResult r) {
    Peer& q = *peers_[i];
    if (!q.up || q.life != life) return;
    q.catching_up = false;
    if (r.ok && q.trainer) {
      try {
        q.trainer->restore(r.state, "state from peer " + r.from, /*own=*/false);
      } catch (const core::CheckpointError& e) {
        r.ok = false;
        r.reason = "restore";
      }
    } else if (r.ok) {
      be_.upload(q.x.data(), r.state.params.data(), r.state.params.size() * sizeof(float));
      q.step = r.state.step;
    }
    if (r.ok) {
      ++catch_ups_ok_;
    } else {
      ++catch_ups_failed_;
    }
    emit({{"t", now_s()},
          {"event", "catch_up"},
          {"peer", i},
          {"ok", r.ok},
          {"reason", r.reason},
          {"from", r.ok ? index_of(r.from) : -1},
          {"s", now_s() - started},
          {"bytes", r.bytes}});
    boundary(i, false);  // now it averages, from the vector it took
    if (q.trainer) train_tick(i, life);
  });
}

void World::start_peer(int i, bool joiner) {
  Peer& p = *peers_[i];
  p.t = p.ever_started ? &net_.revive(p.addr) : &net_.add_node(p.addr, p.id);
  p.ever_started = true;
  set_up(p, true);
  p.up_since = now_s();
  ++p.life;
  p.boundary_pending = false;
  std::fill(p.view.begin(), p.view.end(), kUnseen);
  p.known_alive = 0;
  build_protocols(p);
  p.catching_up = joiner;
  if (cfg_.train()) {
    start_training(p, joiner);
    return;
  }
  boundary(i, false);  // the averager learns the vector's size and keeps a snapshot ready
  p.node->start();
  if (joiner) {
    const std::uint64_t l = p.life;
    p.t->post([this, i, l] { catch_up(i, l); });
  }
  base::SplitMix64 phase(mix64(cfg_.seed, 0xABCD0000ULL + i + 0x10000 * p.life));
  const auto period = ms_of(cfg_.exchange_interval_s);
  const std::uint64_t life = p.life;
  p.t->schedule(Millis(static_cast<Millis::rep>(phase.below(period.count()) + 1)),
                [this, i, life] { tick(i, life); });
}

void World::tear_down(Peer& p) {
  // The node vanished from the network first (kill): nothing of it runs any more. Its trainer
  // goes too: a restart resumes from the last checkpoint (p.ckpt).
  p.training = false;
  p.trainer.reset();  // before the node, its step hook
  if (p.node) {
    p.lag_waits += p.node->lag_waits();
    p.lag_wait_s += p.node->lag_wait_s();
    p.pace_waits += p.node->pace_waits();
    p.pace_wait_s += p.node->pace_wait_s();
  }
  p.node.reset();
  p.metrics.reset();
}

void World::tick(int i, std::uint64_t life) {
  Peer& p = *peers_[i];
  if (!p.up || p.life != life || !ticking_) return;
  ++p.step;
  boundary(i, true);
  p.t->schedule(ms_of(cfg_.exchange_interval_s), [this, i, life] { tick(i, life); });
}

// A step boundary of peer i: the averager's training-thread side (a new exchange when initiate).
void World::boundary(int i, bool initiate) {
  Peer& p = *peers_[i];
  if (!p.up || !p.node || p.catching_up) return;
  if (p.trainer) {
    // A training peer answers the averager at its next step, as gossip-peer does; between steps
    // while it waits for its cohort or lingers after its last step, and in a --max-lag or
    // --max-ahead wait (a serve pass, as gossip-peer's waiting training thread makes).
    if (p.training && p.node->holding()) p.trainer->call_hook(/*done=*/false);
    else if (!p.training) p.trainer->call_hook(/*done=*/true);
    return;
  }
  core::StepContext ctx{be_, p.x.data(), p.x.size(), p.step, p.step, 1, 0, !initiate};
  VectorState state(*this, p);
  if (p.step > 0) ctx.state = &state;  // a catch-up server serves only a state that took a step
  p.node->hook().between_steps(ctx);
}

// ------------------------------------------------------------------------------------------------
// What the peers report

void World::on_member(int observer, const gossip::MemberInfo& m) {
  const int j = index_of(m.id);
  if (j < 0) return;
  Peer& o = *peers_[observer];
  const int before = o.view[j];
  const int after = static_cast<int>(m.state);
  o.view[j] = static_cast<std::int8_t>(after);
  o.known_alive += (after == 0 ? 1 : 0) - (before == 0 ? 1 : 0);
  if (before == kUnseen && m.state == gossip::MemberState::Alive) {
    // Only a peer that has just come to hold every other alive can complete the swarm: the scan
    // runs about once per peer, not once per first sight (n^3 at 10,000 peers).
    if (!converged_s_ && o.known_alive == up_ - 1) check_converged();
    return;  // first sight: counted, not logged (n^2 lines at join)
  }
  const Peer& v = *peers_[j];
  if (m.state == gossip::MemberState::Suspect) ++suspicions_;
  if (m.state == gossip::MemberState::Dead && responsive(v)) {
    ++false_dead_;
    if (now_s() - v.up_since > detection_bound_s()) ++false_dead_stable_;
  }
  if (!live_state(after))
    for (auto& c : crashes_)
      if (c->victim == j && !c->restarted_after && !c->detected.count(observer) &&
          std::find(c->observers.begin(), c->observers.end(), observer) != c->observers.end())
        c->detected[observer] = now_s() - c->at;
  emit({{"t", now_s()},
        {"event", "member"},
        {"peer", observer},
        {"member", j},
        {"state", state_name(m.state)},
        {"incarnation", m.incarnation},
        {"member_up", responsive(v)}});
}

void World::on_exchange(int i, const gossip::ExchangeEvent& e) {
  Peer& p = *peers_[i];
  p.bytes += e.bytes_sent;
  if (e.ok) {
    ++ok_sides_;
    ++p.ok;
  } else {
    ++failed_sides_;
    ++p.failed;
    ++failed_by_reason_[e.reason()];
  }
  if (cfg_.trace_exchanges)
    emit({{"t", now_s()},
          {"event", "exchange"},
          {"peer", i},
          {"partner", index_of(e.partner)},
          {"role", std::string(gossip::role_name(e.role))},
          {"ok", e.ok},
          {"reason", e.reason()},
          {"round", e.round},
          {"ms", e.ms}});
  // Round boundaries (n/2 exchanges = n ok sides) for the rate check, before churn changes n.
  if (e.ok && rounds_sampled_ < cfg_.rate_rounds && ok_sides_ >= next_round_sides_) {
    ++rounds_sampled_;
    next_round_sides_ += static_cast<std::uint64_t>(cfg_.peers);
    sample("round");
  }
}

void World::check_converged() {
  if (!all_started_) return;  // everyone knowing everyone counts once the initial peers are up
  const int up = up_count();
  for (const auto& p : peers_)
    if (p->up && p->known_alive != up - 1) return;
  converged_s_ = now_s();
  emit({{"t", now_s()},
        {"event", "converged"},
        {"peers", up},
        {"after_last_start_s", now_s() - last_start_s_}});
}

// ------------------------------------------------------------------------------------------------
// The run

json World::run() {
  wall_start_ = last_progress_ = std::chrono::steady_clock::now();
  // The baseline before any exchange, over every initial peer (the ones still to start included).
  next_round_sides_ = static_cast<std::uint64_t>(cfg_.peers);
  sum0_ = coordinate_sums();
  if (!cfg_.train()) sample("initial");  // a training peer's vector exists once it starts
  // Seeds first, at 0; the others at seeded random moments over join_spread_s.
  base::SplitMix64 rng(mix64(cfg_.seed, 0x5EED));
  std::vector<std::pair<Millis, int>> starts;
  for (int i = 0; i < cfg_.peers; ++i) {
    const bool seed = i < cfg_.seeds;
    const auto spread = static_cast<std::uint64_t>(ms_of(cfg_.join_spread_s).count());
    starts.emplace_back(seed || spread == 0 ? Millis(0) : Millis(rng.below(spread)), i);
  }
  std::stable_sort(starts.begin(), starts.end());
  for (auto [at, i] : starts) {
    net_.run_until(at);
    start_peer(i);
    report_progress();
  }
  last_start_s_ = now_s();
  all_started_ = true;
  check_converged();
  // The train workload runs until every peer has trained, lingered and left (--sim-seconds, when
  // given, cuts it short).
  const Millis end = ms_of(cfg_.sim_seconds > 0 ? cfg_.sim_seconds : 3 * expected_train_s_ + 600);
  const Millis sample_every = std::max(Millis(1), ms_of(cfg_.sample_every_s));
  const Millis census_every = Millis(10000);
  Millis next_sample = net_.now() + sample_every, next_census = net_.now() + census_every;
  std::size_t next_churn = 0;
  while (net_.now() < end) {
    Millis next = std::min({end, next_sample, next_census});
    if (next_churn < schedule_.timed.size())
      next = std::min(next, ms_of(schedule_.timed[next_churn].at));
    net_.run_until(next);
    while (next_churn < schedule_.timed.size() && ms_of(schedule_.timed[next_churn].at) <= next) {
      const auto& e = schedule_.timed[next_churn++];
      apply_churn(e, e.generated ? "random" : "scenario");
      // An effect with a duration ends by itself, as gossip-launch's ChurnDriver::schedule_end.
      // "for" is only allowed on crash, stop, pause, partition, link and fault (the parser
      // checks); a crash or stop ends with a restart.
      if (e.for_s) {
        core::ChurnEvent heal;
        // Link and fault ends are the same kind with no rate, loss or mode: restore.
        const bool down = e.kind == core::ChurnKind::Crash || e.kind == core::ChurnKind::Stop;
        heal.kind = down                                   ? core::ChurnKind::Restart
                    : e.kind == core::ChurnKind::Pause     ? core::ChurnKind::Resume
                    : e.kind == core::ChurnKind::Partition ? core::ChurnKind::Heal
                                                           : e.kind;
        if (e.kind != core::ChurnKind::Partition) heal.peers = e.peers;
        heal.generated = e.generated;
        heal.at = e.at + *e.for_s;
        auto pos = std::upper_bound(schedule_.timed.begin() + next_churn, schedule_.timed.end(),
                                    heal, [](const auto& a, const auto& b) { return a.at < b.at; });
        schedule_.timed.insert(pos, heal);
      }
    }
    if (next >= next_sample) {
      sample("periodic");
      next_sample += sample_every;
    }
    if (next >= next_census) {
      census();
      next_census += census_every;
    }
    if (!converged_s_) check_converged();
    report_progress();
    if (training_over() && std::none_of(schedule_.timed.begin() + next_churn, schedule_.timed.end(),
                                        [](const auto& e) { return !e.generated; }))
      break;
  }
  return finish();
}

}  // namespace gossiptrain::apps::sim
