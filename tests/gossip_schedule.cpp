// The hypercube partner schedule (--partner-choice hypercube, partner_schedule.hpp): its steps
// average exactly, and on the real exchange protocol over the in-memory network (no training) a
// quiet swarm of 7, 10 or 16 peers holds the exact average after the schedule's bound, keeps the
// sum over peers, and goes on when a scheduled partner is dead.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/exchange/partner_schedule.hpp"
#include "tests/gossip_averager_harness.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {
int floor_log2(int n) {
  int l = 0;
  while ((2 << l) <= n) ++l;
  return l;
}
}  // namespace

TEST_CASE("partner schedule: pairs agree, and its rounds reach the exact average for any n",
          "[gossip]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> N(0.0, 1.0);
  for (int n = 2; n <= 70; ++n) {
    INFO("n = " << n);
    const int len = schedule_length(n);
    const bool pow2 = (n & (n - 1)) == 0;
    CHECK(len == floor_log2(n) + (pow2 ? 0 : 2));
    std::vector<double> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = N(rng);
    double mean = 0;
    for (double v : x) mean += v;
    mean /= n;
    for (int r = 0; r < len; ++r) {
      std::vector<double> next = x;
      for (int a = 0; a < n; ++a) {
        const ScheduleStep s = schedule_step(n, a, r);
        if (s.partner < 0) continue;
        const ScheduleStep back = schedule_step(n, s.partner, r);
        REQUIRE(back.partner == a);  // both sides derive the same pair
        REQUIRE(s.w >= 0.0);
        REQUIRE(s.w <= 1.0);
        if (pow2) CHECK(s.w == 0.5);  // every exchange keeps the sum
        next[std::size_t(a)] = x[std::size_t(a)] + s.w * (x[std::size_t(s.partner)] - x[std::size_t(a)]);
      }
      x = next;
    }
    for (double v : x) CHECK(std::abs(v - mean) < 1e-12);
  }
  CHECK_THROWS(schedule_step(5, 0, 4));
  CHECK(schedule_length(1) == 0);
}

TEST_CASE("partner schedule: the view is the sorted member list and its hash", "[gossip]") {
  const ScheduleView a = make_view({"c", "a"}, "b");
  const ScheduleView b = make_view({"a", "b"}, "c");
  CHECK(a.ids == std::vector<std::string>{"a", "b", "c"});
  CHECK(a.hash == b.hash);
  CHECK(a.rank == 1);
  CHECK(b.rank == 2);
  CHECK(make_view({"a", "bc"}, "d").hash != make_view({"ab", "c"}, "d").hash);
}

TEST_CASE("partner schedule: the round travels in REQUEST and ACCEPT, bounded", "[gossip]") {
  RequestMsg r;
  r.exchange_id = 9;
  CHECK(encode_request(r)->size() == kRequestBytes);  // no schedule: the plain 51 bytes
  r.round = 12;
  r.view = 0xabcdef;
  auto b = encode_request(r);
  REQUIRE(b->size() == kScheduleRequestBytes);
  const RequestMsg p = decode_request(*b);
  CHECK(p.round == 12);
  CHECK(p.view == 0xabcdef);
  CHECK(decode_request(*encode_request(RequestMsg{})).round == -1);
  r.round = std::int64_t(1) << 61;  // beyond what an ACCEPT can carry back
  CHECK_THROWS_AS(decode_request(*encode_request(r)), base::DecodeError);
  net::Bytes cut(*b);
  cut.pop_back();
  CHECK_THROWS_AS(decode_request(cut), base::DecodeError);
  AcceptMsg a;
  a.exchange_id = 9;
  CHECK(encode_accept(a)->size() == kAcceptBytes);
  a.round = 7;
  a.scheduled = true;
  const AcceptMsg q = decode_accept(*encode_accept(a));
  CHECK(q.round == 7);
  CHECK(q.scheduled);
  a.scheduled = false;
  CHECK_FALSE(decode_accept(*encode_accept(a)).scheduled);
}

namespace {
AveragerConfig hypercube_config() {
  AveragerConfig cfg = base_config();
  cfg.wire = WireFormat::Fp32;
  cfg.choice.mode = PartnerMode::Hypercube;
  return cfg;
}

// Scheduled exchanges peer i takes part in over one pass of the schedule.
int scheduled_per_cycle(int n, int rank) {
  int k = 0;
  for (int r = 0; r < schedule_length(n); ++r) k += schedule_step(n, rank, r).partner >= 0;
  return k;
}

// Peer index -> rank among the sorted ids.
int rank_of(Cluster& c, std::size_t i) {
  std::vector<std::string> ids;
  for (auto& p : c.peers) ids.push_back(p->id);
  return make_view(ids, c[i].id).rank;
}
}  // namespace

TEST_CASE("partner schedule: a quiet swarm holds the exact average after the schedule's bound",
          "[gossip]") {
  for (int n : {7, 10, 16}) {
    INFO("n = " << n);
    constexpr std::size_t kDim = 256;
    Cluster c(n, kDim, hypercube_config(), 40 + std::uint64_t(n));
    const auto v0 = c.all_values();
    const auto sum0 = Cluster::coordinate_sums(v0);
    // Each peer steps every 7 virtual ms at its own phase, so exchanges start at different
    // moments, until it has served its rounds of one pass of the schedule; then it only serves.
    auto peer_done = [&](std::size_t i) {
      int k = 0;
      for (auto& e : c[i].events) k += e.ok && e.round >= 0 && e.round < schedule_length(n);
      return k >= scheduled_per_cycle(n, rank_of(c, i));
    };
    auto cycle_done = [&] {
      for (std::size_t i = 0; i < c.size(); ++i)
        if (!peer_done(i)) return false;
      return true;
    };
    auto train = [&] {
      const std::int64_t now = c.net.now().count();
      for (std::size_t i = 0; i < c.size(); ++i) {
        if (!peer_done(i) && (now + std::int64_t(i) * 3) % 7 == 0) c[i].step_hook(c.be);
        else c[i].hook(c.be, true);
      }
    };
    REQUIRE(c.run_until(cycle_done, Millis(60000), train));
    REQUIRE(c.run_until([&] { return c.none_in_exchange(); }, Millis(5000)));
    // Only the schedule's exchanges mixed anything, one per round with a partner (a peer that
    // finished its pass may have begun the next one with a partner that finished too: both
    // already hold the average then).
    for (std::size_t i = 0; i < c.size(); ++i) {
      int first_pass = 0;
      for (auto& e : c[i].events)
        if (e.ok) {
          CHECK(e.round >= 0);
          first_pass += e.round >= 0 && e.round < schedule_length(n);
        }
      CHECK(first_pass == scheduled_per_cycle(n, rank_of(c, i)));
    }
    const auto v = c.all_values();
    const auto s = Cluster::coordinate_sums(v);
    double worst = 0, worst_sum = 0;
    for (std::size_t j = 0; j < kDim; ++j) {
      const double mean = sum0[j] / n;
      for (const auto& x : v) worst = std::max(worst, std::abs(double(x[j]) - mean));
      worst_sum = std::max(worst_sum, std::abs(s[j] - sum0[j]));
    }
    // Exact up to float rounding (values ~N(0, 1), a few float operations each).
    CHECK(worst < 1e-5);
    CHECK(worst_sum < 1e-4 * n);
    CHECK(Cluster::msd(v) < 1e-12 * Cluster::msd(v0));
  }
}

TEST_CASE("partner schedule: a dead scheduled partner is skipped, the run goes on, and the rest "
          "agree once the membership drops it",
          "[gossip]") {
  constexpr int n = 10;
  constexpr std::size_t kDim = 64;
  Cluster c(n, kDim, hypercube_config(), 77);
  const std::size_t dead = 4;
  c.net.kill(c[dead].addr);
  c[dead].paused = true;
  std::size_t stepped = 0;
  auto train = [&] {
    const std::int64_t now = c.net.now().count();
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (i == dead) continue;
      if ((now + std::int64_t(i) * 3) % 7 == 0) {
        c[i].step_hook(c.be);
        ++stepped;
      } else {
        c[i].hook(c.be, true);
      }
    }
  };
  // 20 virtual seconds with the dead peer still listed live: its partners back off from it and
  // skip its rounds, then average with drawn partners; every live peer keeps exchanging.
  c.run_until([] { return false; }, Millis(20000), train);
  REQUIRE(c.run_until([&] { return c.none_in_exchange(); }, Millis(5000)));
  CHECK(stepped > 0);
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (i == dead) continue;
    int ok = 0, scheduled = 0;
    for (auto& e : c[i].events) {
      ok += e.ok;
      scheduled += e.ok && e.round >= 0;
    }
    INFO("peer " << i);
    CHECK(ok >= 10);
    CHECK(scheduled >= 1);
  }
  // The membership drops it: the schedule is re-derived for the 9 left, and the run goes on to
  // consensus among them.
  for (auto& p : c.peers) {
    auto& d = p->dir.peers;
    d.erase(std::remove_if(d.begin(), d.end(), [&](const PeerRef& r) { return r.id == c[dead].id; }),
            d.end());
    p->events.clear();
  }
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < c.size(); ++i)
    if (i != dead) live.push_back(i);
  auto live_values = [&] {
    std::vector<std::vector<float>> v;
    for (std::size_t i : live) v.push_back(c[i].values(c.be));
    return v;
  };
  // The peers skipped rounds at different moments: the first exchanges re-align their round
  // counts (a peer behind catches up from its partner's answer, one ahead is answered BUSY and
  // waits); the 9 left end on one vector (often they already are, from the 20 s before).
  REQUIRE(c.run_until([&] { return Cluster::msd(live_values()) < 1e-10; }, Millis(60000), train));
}

TEST_CASE("partner schedule: a new member list restarts the count, so the first pass once the "
          "lists agree is exact",
          "[gossip]") {
  constexpr int n = 8;
  constexpr std::size_t kDim = 64;
  Cluster c(n, kDim, hypercube_config(), 91);
  // For 10 virtual seconds each peer misses another from its list: no two lists agree, the
  // exchanges are plain, and each peer skips its rounds as their waits run out, so the counts
  // drift apart.
  for (std::size_t i = 0; i < c.size(); ++i) {
    auto& d = c[i].dir.peers;
    const std::string missing = c[(i + 1) % c.size()].id;
    d.erase(std::remove_if(d.begin(), d.end(), [&](const PeerRef& r) { return r.id == missing; }),
            d.end());
  }
  std::vector<bool> stop(c.size(), false);
  auto train = [&] {
    const std::int64_t now = c.net.now().count();
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (!stop[i] && (now + std::int64_t(i) * 3) % 7 == 0) c[i].step_hook(c.be);
      else c[i].hook(c.be, true);
    }
  };
  c.run_until([] { return false; }, Millis(10000), train);
  REQUIRE(c.run_until([&] { return c.none_in_exchange(); }, Millis(5000)));
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(!c[i].events.empty());
  // The lists agree from now on: every peer starts the pass at round 0, and after it (each peer
  // stops starting exchanges once it has served its rounds) all hold the exact average.
  // (New vectors: the plain exchanges have averaged the old ones by now.)
  std::mt19937_64 rng(3);
  std::normal_distribution<float> N(0.0f, 1.0f);
  for (auto& p : c.peers) {
    p->dir.peers.clear();
    for (auto& q : c.peers)
      if (p != q) p->dir.peers.push_back({q->id, q->addr});
    p->events.clear();
    std::vector<float> x(kDim);
    for (auto& f : x) f = N(rng);
    c.be.upload(p->x.data(), x.data(), x.size() * sizeof(float));
  }
  const auto v0 = c.all_values();
  const auto sum0 = Cluster::coordinate_sums(v0);
  auto served = [&](std::size_t i) {
    int k = 0;
    for (auto& e : c[i].events) k += e.ok && e.round >= 0 && e.round < schedule_length(n);
    return k;
  };
  auto pass_done = [&] {
    bool all = true;
    for (std::size_t i = 0; i < c.size(); ++i) {
      stop[i] = served(i) >= scheduled_per_cycle(n, rank_of(c, i));
      all = all && stop[i];
    }
    return all;
  };
  REQUIRE(c.run_until(pass_done, Millis(60000), train));
  REQUIRE(c.run_until([&] { return c.none_in_exchange(); }, Millis(5000)));
  for (std::size_t i = 0; i < c.size(); ++i) {
    INFO("peer " << i);
    std::int64_t expect = 0;
    for (auto& e : c[i].events)
      if (e.ok) {
        CHECK(e.round == expect);  // its rounds in order from 0, nothing plain in between
        ++expect;
      }
  }
  const auto v = c.all_values();
  const auto s = Cluster::coordinate_sums(v);
  for (std::size_t j = 0; j < kDim; ++j) CHECK(std::abs(s[j] - sum0[j]) < 1e-4 * n);
  CHECK(Cluster::msd(v) < 1e-12 * Cluster::msd(v0));
}

TEST_CASE("partner schedule: a member known but not live keeps its place in the list, its rounds "
          "skipped at once, with no plain exchange in between",
          "[gossip]") {
  constexpr int n = 7;  // with the dead member: 8 in the list, the hypercube of 3 rounds
  constexpr std::size_t kDim = 64;
  Cluster c(n, kDim, hypercube_config(), 23);
  for (auto& p : c.peers) p->dir.gone = {"peer-dead"};
  const auto v0 = c.all_values();
  const auto sum0 = Cluster::coordinate_sums(v0);
  auto train = [&] {
    const std::int64_t now = c.net.now().count();
    for (std::size_t i = 0; i < c.size(); ++i) {
      if ((now + std::int64_t(i) * 3) % 7 == 0) c[i].step_hook(c.be);
      else c[i].hook(c.be, true);
    }
  };
  // 3 virtual seconds: far below the round's wait (2 s) times the passes a stuck partner would
  // cost, so a peer that asked the dead member (or waited for it) would show plain exchanges.
  c.run_until([] { return false; }, Millis(3000), train);
  REQUIRE(c.run_until([&] { return c.none_in_exchange(); }, Millis(5000)));
  std::vector<std::string> ids;
  for (auto& p : c.peers) ids.push_back(p->id);
  ids.push_back("peer-dead");
  const ScheduleView all = make_view(ids, c[0].id);
  REQUIRE(all.n() == 8);
  const int dead_rank = all.rank_of("peer-dead");
  for (std::size_t i = 0; i < c.size(); ++i) {
    INFO("peer " << i);
    const int rank = all.rank_of(c[i].id);
    int ok = 0;
    for (auto& e : c[i].events) {
      if (!e.ok) continue;
      ++ok;
      REQUIRE(e.round >= 0);  // all scheduled: the dead member's rounds were skipped, not waited on
      const ScheduleStep st = schedule_step(8, rank, int(e.round % 3));
      CHECK(st.partner != dead_rank);
      CHECK(e.partner == all.ids[std::size_t(st.partner)]);
    }
    CHECK(ok >= 3);
  }
  const auto v = c.all_values();
  const auto s = Cluster::coordinate_sums(v);
  for (std::size_t j = 0; j < kDim; ++j) CHECK(std::abs(s[j] - sum0[j]) < 1e-4 * n);
  CHECK(Cluster::msd(v) < 0.1 * Cluster::msd(v0));
}

TEST_CASE("partner schedule: after a member dies, an exchange a busy scheduled partner turns down "
          "goes to a drawn partner for a while, and the live ones still agree",
          "[gossip]") {
  constexpr int n = 8;
  constexpr std::size_t kDim = 64;
  Cluster c(n, kDim, hypercube_config(), 31);
  // A quiet start: every member live, no plain exchange (the quiet swarm's test above).
  c.train_then_settle(Millis(3000), 7, 3);
  REQUIRE(c.none_in_exchange());
  // The last peer dies: each directory lists it as gone (membership declared it dead).
  const std::size_t dead = n - 1;
  auto train = [&] {  // as train_then_settle's, without the dead peer
    const std::int64_t now = c.net.now().count();
    for (std::size_t i = 0; i < dead; ++i) {
      if ((now + std::int64_t(i) * 3) % 7 == 0) c[i].step_hook(c.be);
      else c[i].hook(c.be, true);
    }
  };
  c.net.kill(c[dead].addr);
  c[dead].paused = true;
  for (auto& p : c.peers) {
    auto& d = p->dir.peers;
    d.erase(std::remove_if(d.begin(), d.end(), [&](const PeerRef& r) { return r.id == c[dead].id; }),
            d.end());
    p->dir.gone = {c[dead].id};
    p->events.clear();
  }
  // Within the churn window (5 round waits, 10 s) busy answers send exchanges to drawn partners.
  c.run_until([] { return false; }, Millis(6000), train);
  int plain = 0, scheduled = 0;
  for (std::size_t i = 0; i < dead; ++i)
    for (auto& e : c[i].events) {
      plain += e.ok && e.round < 0;
      scheduled += e.ok && e.round >= 0;
    }
  INFO("ok exchanges within 6 s of the death: " << scheduled << " scheduled, " << plain << " plain");
  CHECK(plain > 0);
  CHECK(scheduled > 0);
  // Then quiet again: the 7 live ones end on one vector.
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < dead; ++i) live.push_back(i);
  auto live_values = [&] {
    std::vector<std::vector<float>> v;
    for (std::size_t i : live) v.push_back(c[i].values(c.be));
    return v;
  };
  REQUIRE(c.run_until([&] { return Cluster::msd(live_values()) < 1e-10; }, Millis(60000), train));
}

TEST_CASE("partner schedule: without exact passes (training) a scheduled partner that turns the "
          "exchange down sends it to a drawn partner at once",
          "[gossip]") {
  constexpr int n = 8;
  constexpr std::size_t kDim = 64;
  for (bool exact : {true, false}) {
    AveragerConfig cfg = hypercube_config();
    cfg.choice.exact_passes = exact;
    Cluster c(n, kDim, cfg, 41);
    c.train_then_settle(Millis(4000), 7, 3);
    REQUIRE(c.none_in_exchange());
    int plain = 0, scheduled = 0, busy = 0;
    for (std::size_t i = 0; i < c.size(); ++i)
      for (auto& e : c[i].events) {
        plain += e.ok && e.round < 0;
        scheduled += e.ok && e.round >= 0;
        busy += !e.ok && e.failure.kind == ExchangeFailure::Busy;
      }
    INFO("exact passes " << exact << ": " << scheduled << " scheduled, " << plain << " plain, "
                         << busy << " turned down busy");
    CHECK(scheduled > 0);
    if (exact) {
      CHECK(plain == 0);  // it waits for the partner
      CHECK(busy > 0);
    } else {
      CHECK(plain > 0);
    }
  }
}
