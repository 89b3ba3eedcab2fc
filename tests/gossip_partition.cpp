// The averaging exchange across a network partition, on the in-memory network: each side of a
// split swarm keeps averaging within itself while the other side is unreachable; the fitted answer
// deadline and the backoff of unreachable partners that make it so.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "tests/gossip_averager_harness.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {

struct Timed {
  Millis t;
  int peer;
  ExchangeEvent e;
};

// Peer i takes a step every step_ms (virtual), shifted by i * 3 ms, and serves in between.
void train_for(Cluster& c, Millis limit, std::int64_t step_ms) {
  auto train = [&] {
    const std::int64_t now = c.net.now().count();
    for (std::size_t i = 0; i < c.size(); ++i) {
      if ((now + static_cast<std::int64_t>(i) * 3) % step_ms == 0) c[i].step_hook(c.be);
      else c[i].hook(c.be, false);
    }
  };
  c.run_until([] { return false; }, limit, train);
}

}  // namespace

TEST_CASE("a partitioned swarm of four keeps averaging within each side", "[gossip]") {
  // As on a real network (tests/system_churn.cpp, the --netns partition): dials into the other
  // side fail only at the transport's 5 s handshake deadline, and requests on an exchange
  // connection opened before the split get no answer at all.
  net::SimOptions opts;
  opts.connect_timeout = Millis(5000);
  const std::uint64_t seed = GENERATE(1, 2, 3, 4, 5);
  Cluster c(4, 500, base_config(), seed, opts);
  std::vector<Timed> log;
  for (int i = 0; i < 4; ++i)
    c[std::size_t(i)].avg->set_event_callback(
        [&log, &c, i](const ExchangeEvent& e) { log.push_back({c.net.now(), i, e}); });
  auto index = [&](const std::string& id) {
    for (std::size_t k = 0; k < c.size(); ++k)
      if (c[k].id == id) return int(k);
    return -1;
  };
  auto side = [](int i) { return i < 2 ? 0 : 1; };

  // Everyone averages with everyone for 1 s (exchange connections to all partners are open),
  // then the swarm splits into {0, 1} | {2, 3} for 8 s, as the system test does.
  train_for(c, Millis(1000), 10);
  const Millis split = c.net.now();
  c.net.partition({{c[0].addr, c[1].addr}, {c[2].addr, c[3].addr}});
  train_for(c, Millis(8000), 10);
  const Millis healed = c.net.now();

  int within[2] = {0, 0}, across = 0;
  for (const auto& x : log) {
    if (!x.e.ok || x.t <= split || x.t > healed) continue;
    const int other = index(x.e.partner);
    REQUIRE(other >= 0);
    if (side(x.peer) == side(other)) ++within[side(x.peer)];
    else ++across;
  }
  INFO("seed " << seed << ": ok exchanges within side {0,1} " << within[0] << ", within {2,3} "
               << within[1] << ", across " << across);
  std::printf("partition of 8 s (seed %llu): ok exchanges within {0,1} %d, within {2,3} %d\n",
              static_cast<unsigned long long>(seed), within[0], within[1]);
  // An exchange that had begun before the split may still finish right after it (its messages
  // were already delivered); none can start across it.
  CHECK(across <= 2);
  // Each side averages within itself for most of the partition: at 10 ms a step an unhindered
  // pair does hundreds of exchanges in 8 s; at least 50 means it was not held up for most of it.
  CHECK(within[0] >= 50);
  CHECK(within[1] >= 50);
}

TEST_CASE("the answer deadline fits the answers measured, within its floor and ceiling", "[gossip]") {
  AnswerDeadline d(Millis(1000), Millis(5000));
  CHECK(d.answer() == Millis(5000));  // nothing measured: the configured deadline
  CHECK(d.connect() == Millis(5000));
  for (int i = 0; i < 20; ++i) d.record(20);
  CHECK(d.answer() == Millis(1000));  // a LAN's answers: the floor
  CHECK(d.connect() == Millis(2000));
  for (int i = 0; i < 20; ++i) d.record(i % 2 ? 200 : 1400);  // slow, jittery answers
  CHECK(d.answer() > Millis(2000));
  CHECK(d.answer() <= Millis(5000));
  for (int i = 0; i < 5; ++i) d.record(60000);  // never above the ceiling
  CHECK(d.answer() == Millis(5000));
  d.record(-1);  // ignored
  d.record(std::nan(""));
  CHECK(d.answer() == Millis(5000));
  AnswerDeadline tight(Millis(1000), Millis(300));  // a ceiling below the floor wins
  tight.record(1);
  CHECK(tight.answer() == Millis(300));
}

TEST_CASE("an unreachable partner is backed off, longer each time, until it answers", "[gossip]") {
  PartnerChoice pc;  // backoff 2 s, doubling up to 16 s
  const Millis t0(100000);
  CHECK_FALSE(pc.backed_off("a", t0));
  pc.unreachable("a", t0);
  CHECK(pc.backed_off("a", t0 + Millis(1999)));
  CHECK_FALSE(pc.backed_off("a", t0 + Millis(2000)));
  pc.unreachable("a", t0);
  CHECK(pc.backed_off("a", t0 + Millis(3999)));
  CHECK_FALSE(pc.backed_off("a", t0 + Millis(4000)));
  for (int i = 0; i < 10; ++i) pc.unreachable("a", t0);
  CHECK(pc.backed_off("a", t0 + Millis(15999)));
  CHECK_FALSE(pc.backed_off("a", t0 + Millis(16000)));  // capped
  CHECK_FALSE(pc.backed_off("b", t0));
  pc.answered("a");
  CHECK_FALSE(pc.backed_off("a", t0));
  pc.unreachable("a", t0);  // the doubling starts over
  CHECK_FALSE(pc.backed_off("a", t0 + Millis(2000)));
}

namespace {

// The end of a partitioned run on the in-memory network, as in the 8-peer --netns run that ended in
// cliques: {0, 1} | {2, 3} train apart (each side drifts its own way, so the sides end far from
// each other), then training ends (the learning rate has decayed: nobody moves any more) and the
// partition heals. Peers 0 and 2 have finished and only serve; 1 and 3 still pass step
// boundaries (their last steps) and start exchanges. Clipped mixing with gossip-peer's defaults.
struct HealAtTheEnd {
  static constexpr std::size_t kN = 1000;
  Cluster c;
  std::vector<Timed> log;
  Millis healed{0};

  static AveragerConfig config() {
    AveragerConfig cfg = base_config();
    cfg.robust.mix = MixMode::Clipped;
    cfg.robust.suspect_clip = true;
    return cfg;
  }

  explicit HealAtTheEnd(std::uint64_t seed, const AveragerConfig& cfg = config())
      : c(4, kN, cfg, seed) {
    for (int i = 0; i < 4; ++i)
      c[std::size_t(i)].avg->set_event_callback(
          [this, i](const ExchangeEvent& e) { log.push_back({c.net.now(), i, e}); });
    // Every peer starts from the same weights, as gossip-launch's peers do.
    std::vector<float> v(kN);
    for (std::size_t k = 0; k < kN; ++k) v[k] = 0.5f + 0.1f * float(k % 9);
    for (std::size_t i = 0; i < 4; ++i) c.be.upload(c[i].x.data(), v.data(), kN * sizeof(float));
    // Training: a step every 10 ms; each step moves a peer along its side's direction and a
    // direction of its own (what its shard adds), so peers of a side stay close by averaging.
    auto train = [&](double side_apart) {
      return [&, side_apart] {
        const std::int64_t now = c.net.now().count();
        for (std::size_t i = 0; i < 4; ++i) {
          if ((now + std::int64_t(i) * 3) % 10 != 0) {
            c[i].hook(c.be, false);
            continue;
          }
          auto x = c[i].values(c.be);
          const double side = i < 2 ? 1.0 : -1.0;
          for (std::size_t k = 0; k < kN; ++k) {
            const double own = ((k + 5 * i) % 7) / 7.0 - 0.43;
            const double apart = side_apart * side * ((k % 3) ? 1.0 : -1.0);
            x[k] += float(1e-3 * (1.0 + own + apart));
          }
          c.be.upload(c[i].x.data(), x.data(), kN * sizeof(float));
          c[i].step_hook(c.be);
        }
      };
    };
    c.run_until([] { return false; }, Millis(1000), train(0.0));
    c.net.partition({{c[0].addr, c[1].addr}, {c[2].addr, c[3].addr}});
    c.run_until([] { return false; }, Millis(4000), train(0.2));
    c.net.heal();
    healed = c.net.now();
  }

  // After the heal: 0 and 2 serve only, 1 and 3 pass a step boundary every 10 ms without moving.
  void end_of_training(Millis limit) {
    c.run_until([] { return false; }, limit, [&] {
      const std::int64_t now = c.net.now().count();
      for (std::size_t i = 0; i < 4; ++i) {
        if (i % 2 == 1 && (now + std::int64_t(i) * 3) % 10 == 0) c[i].step_hook(c.be);
        else c[i].hook(c.be, true);
      }
    });
  }

  // Mean over peers of ||x_i - average||, as gossip-launch's consensus distance.
  double consensus() {
    const auto v = c.all_values();
    double total = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      double sq = 0;
      for (std::size_t k = 0; k < kN; ++k) {
        double mean = 0;
        for (const auto& y : v) mean += y[k];
        mean /= double(v.size());
        sq += (v[i][k] - mean) * (v[i][k] - mean);
      }
      total += std::sqrt(sq);
    }
    return total / double(v.size());
  }
};

}  // namespace

TEST_CASE("a partition healed at the end of training: the swarm merges, no side splits in two",
          "[gossip]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  HealAtTheEnd h(seed);
  const double apart = h.consensus();
  h.end_of_training(Millis(3000));
  const double after = h.consensus();
  const auto v = h.c.all_values();
  auto dist = [&](std::size_t a, std::size_t b) {
    double sq = 0;
    for (std::size_t k = 0; k < v[a].size(); ++k) sq += (v[a][k] - v[b][k]) * (v[a][k] - v[b][k]);
    return std::sqrt(sq);
  };
  // The smallest clip between peers of one side, and across, in the last second (printed: a clip
  // far below 1 at a distance near 0, once the peers are identical, is harmless).
  double within = 1, across = 1;
  for (const auto& x : h.log) {
    if (!x.e.ok || x.t < h.healed + Millis(2000)) continue;
    int other = -1;
    for (int k = 0; k < 4; ++k)
      if (h.c[std::size_t(k)].id == x.e.partner) other = k;
    double& m = (x.peer < 2) == (other < 2) ? within : across;
    m = std::min(m, x.e.clip);
  }
  std::printf(
      "heal at the end (seed %llu): consensus %.4g at the heal, %.4g 3 s later; peers 0-1 %.3g, "
      "2-3 %.3g apart; smallest clip in the last second within a side %.3g, across %.3g\n",
      static_cast<unsigned long long>(seed), apart, after, dist(0, 1), dist(2, 3), within, across);
  INFO("consensus at the heal " << apart << ", 3 s later " << after);
  REQUIRE(apart > 0.5);  // the sides did drift apart
  // Before each partner's figure counted once in B, the honest-drift floor (0.02) held: the
  // consensus stayed at 36-70% of its value at the heal, and peers of one side stayed apart.
  CHECK(after <= 0.02 * apart);
  CHECK(dist(0, 1) <= 0.02 * apart);
  CHECK(dist(2, 3) <= 0.02 * apart);
}

TEST_CASE("two sides that finished apart merge once they reach each other, while lingering",
          "[gossip]") {
  // Every peer's training is done when the partition heals (the defects issue's run: the heal
  // came in the linger). A lingering peer that only serves leaves the sides apart for good; one
  // that starts exchanges until it is settled (AveragerConfig::settle_distance) merges them.
  const double settle = GENERATE(0.0, 0.01);
  AveragerConfig cfg = HealAtTheEnd::config();
  cfg.settle_distance = settle;
  HealAtTheEnd h(7, cfg);
  const double apart = h.consensus();
  for (std::size_t i = 0; i < 4; ++i) h.c[i].total_steps = h.c[i].step;  // every run is done
  std::size_t before = h.log.size();
  h.c.run_until([] { return false; }, Millis(5000), [&] {
    for (std::size_t i = 0; i < 4; ++i) h.c[i].hook(h.c.be, true);
  });
  const double after = h.consensus();
  std::size_t across = 0;
  for (std::size_t k = before; k < h.log.size(); ++k) {
    const auto& x = h.log[k];
    if (!x.e.ok) continue;
    const bool partner_low = x.e.partner == h.c[0].id || x.e.partner == h.c[1].id;
    if ((x.peer < 2) != partner_low) ++across;
  }
  std::printf("lingering sides, settle %.3g: consensus %.4g at the heal, %.4g 5 s later, %zu "
              "exchanges across (%zu in all)\n",
              settle, apart, after, across, h.log.size() - before);
  REQUIRE(apart > 0.5);
  if (settle == 0) {
    // Nobody starts an exchange: only those of training still under way at the heal end (4 of
    // the 6 crossed, seed 7), and the sides stay apart (3.32 -> 3.27).
    CHECK(h.log.size() - before <= 8);
    CHECK(after >= 0.9 * apart);
  } else {
    CHECK(after <= 0.01);
    // Settled, a peer starts one exchange every 2 s at most: the swarm goes quiet.
    std::size_t late = 0;
    for (std::size_t k = before; k < h.log.size(); ++k)
      if (h.log[k].t >= h.healed + Millis(4000) && h.log[k].e.role == ExchangeRole::Initiator) ++late;
    CHECK(late <= 4);
  }
}
