// The wire of each exchange by partner (link_wire.hpp): a partner whose link is measured slow
// gets the compressed wire, with error feedback, the others fp32; both sides of an exchange use
// the wire of its REQUEST, and the sum over the peers is kept.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <tuple>

#include "gossip/node/comm_state.hpp"
#include "gossip/exchange/link_wire.hpp"
#include "tests/gossip_averager_harness.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {

constexpr std::size_t kD = 65536;  // fp32: 256 KiB a vector, 0.5 MiB an exchange both ways
// The slow peer's link (set_link: its messages leave, and messages to it arrive, at this rate):
// an fp32 exchange takes about 2 s on it, 0.5 MB/s both ways; every other link is unlimited.
constexpr double kSlowBytesPerS = 250e3;

AveragerConfig adaptive_config() {
  AveragerConfig cfg = base_config();
  cfg.gossip_every = 4;
  cfg.slow_link_wire = WireFormat::Int4Rel;
  return cfg;
}

struct Run {
  double drift = 0;  // the worst change of a coordinate's sum over the peers
  double msd_ratio = 0;
};

Run train(Cluster& c, Millis limit) {
  const auto v0 = c.all_values();
  const auto sum0 = Cluster::coordinate_sums(v0);
  c.train_then_settle(limit, 10, 3);
  const auto v = c.all_values();
  const auto s = Cluster::coordinate_sums(v);
  Run r;
  for (std::size_t j = 0; j < s.size(); ++j) r.drift = std::max(r.drift, std::abs(s[j] - sum0[j]));
  r.msd_ratio = Cluster::msd(v) / Cluster::msd(v0);
  return r;
}

}  // namespace

TEST_CASE("link wire: a partner is slow once an exchange in the configured wire measures it so",
          "[gossip]") {
  using Ms = LinkWire::Millis;
  LinkWireConfig cfg;
  cfg.slow_wire = WireFormat::Int4Rel;
  LinkWire lw(cfg, WireFormat::Fp32);
  CHECK(lw.wire_for("a", Ms(0)) == WireFormat::Fp32);  // not measured: the configured wire
  // 2.2 MB both ways in 0.2 s (11 MB/s): fast. In 1 s (2.2 MB/s): slow.
  CHECK_FALSE(lw.record("a", WireFormat::Fp32, 2'200'000, 200, Ms(100)));
  CHECK(lw.wire_for("a", Ms(100)) == WireFormat::Fp32);
  CHECK(lw.record("b", WireFormat::Fp32, 2'200'000, 1000, Ms(100)));
  CHECK(lw.wire_for("b", Ms(200)) == WireFormat::Int4Rel);
  CHECK(lw.takes(WireFormat::Int4Rel));
  CHECK_FALSE(lw.takes(WireFormat::Int8));
  // The compressed exchanges do not measure the link (too small, another wire); a quick failure
  // (few bytes) neither.
  CHECK_FALSE(lw.record("a", WireFormat::Int4Rel, 290'000, 1000, Ms(300)));
  CHECK_FALSE(lw.record("a", WireFormat::Fp32, 1000, 1000, Ms(300)));
  CHECK(lw.wire_for("a", Ms(300)) == WireFormat::Fp32);
  // Measured again after the recheck time: one exchange in the configured wire, which decides.
  CHECK(lw.wire_for("b", Ms(100) + cfg.recheck) == WireFormat::Fp32);
  CHECK_FALSE(lw.record("b", WireFormat::Fp32, 2'200'000, 50, Ms(100) + cfg.recheck));
  CHECK(lw.rate("b") > cfg.slow_bytes_per_s);  // the average of 2.2 and 44 MB/s
  CHECK(lw.wire_for("b", Ms(200) + cfg.recheck) == WireFormat::Fp32);
  // A partner that refuses the slow wire gets the configured one.
  CHECK(lw.record("c", WireFormat::Fp32, 2'200'000, 2000, Ms(100)));
  lw.refused("c");
  CHECK(lw.wire_for("c", Ms(200)) == WireFormat::Fp32);
  // Off: always the configured wire.
  LinkWire off(LinkWireConfig{}, WireFormat::Fp32);
  CHECK_FALSE(off.record("b", WireFormat::Fp32, 2'200'000, 1000, Ms(100)));
  CHECK(off.wire_for("b", Ms(200)) == WireFormat::Fp32);
  CHECK_FALSE(off.takes(WireFormat::Int4Rel));
}

TEST_CASE("a slow link gets the compressed wire, that pair only, both sides agree, the sum is kept",
          "[gossip]") {
  // 6 peers, peer 5 behind a slow link. Its partners measure it slow in their first fp32
  // exchange with it and go to int4-rel with it; it measures every partner slow (its own link)
  // and asks them in int4-rel, which they take. Among peers 0-4, fp32 only.
  AveragerConfig cfg = adaptive_config();
  const WireFormat slow_wire = GENERATE(WireFormat::Int8, WireFormat::Int4Rel);
  INFO("slow link wire " << wire_name(slow_wire));
  cfg.slow_link_wire = slow_wire;
  Cluster c(6, kD, cfg, 21);
  c.net.set_link(c[5].addr, kSlowBytesPerS, std::nullopt);
  const Run r = train(c, Millis(20000));
  const std::string slow = c[5].id;
  // (role-independent) exchange id -> the wire each side reported
  std::map<std::uint64_t, std::vector<WireFormat>> sides;
  std::size_t fast_fp32 = 0, fast_other = 0, slow_rel_ok = 0, slow_fp32_ok = 0;
  for (auto& p : c.peers)
    for (const auto& e : p->events) {
      if (e.ok) sides[e.exchange_id].push_back(e.wire);
      const bool with_slow = p->id == slow || e.partner == slow;
      if (!with_slow) (e.wire == WireFormat::Fp32 ? fast_fp32 : fast_other) += 1;
      else if (e.ok && e.wire == slow_wire) ++slow_rel_ok;
      else if (e.ok && e.wire == WireFormat::Fp32) ++slow_fp32_ok;
    }
  std::printf(
      "slow link, %s: %zu fp32 among the fast peers (%zu other), with the slow peer %zu "
      "%s ok and %zu fp32 ok; msd ratio %.3e, worst sum drift %.3e\n",
      std::string(wire_name(slow_wire)).c_str(), fast_fp32, fast_other, slow_rel_ok,
      std::string(wire_name(slow_wire)).c_str(), slow_fp32_ok, r.msd_ratio, r.drift);
  CHECK(fast_other == 0);  // fast pairs stay on fp32
  CHECK(fast_fp32 >= 100);
  // Each side of a pair that measured it: int4-rel with the slow peer from then on.
  for (int i = 0; i < 5; ++i) {
    CHECK_FALSE(c[i].avg->slow_link(c[(i + 1) % 5].id));
    const bool met = std::any_of(c[i].events.begin(), c[i].events.end(),
                                 [&](const ExchangeEvent& e) { return e.partner == slow && e.ok; });
    if (met) CHECK(c[i].avg->slow_link(slow));
  }
  CHECK(slow_rel_ok >= 2 * 10);  // both sides counted
  CHECK(slow_rel_ok > 2 * slow_fp32_ok);
  for (const auto& [id, wires] : sides) {  // both sides of every exchange: the same wire
    REQUIRE(wires.size() <= 2);  // one: the other side aborted in the commit window
    if (wires.size() == 2) CHECK(wires[0] == wires[1]);
  }
  CHECK(r.msd_ratio < 0.05);  // they still average
  CHECK(r.drift < 1e-3);      // int4-rel's q * d is the same bit for bit on both sides
}

TEST_CASE("a fast swarm stays on fp32: the same exchanges and bytes as without adaptation",
          "[gossip]") {
  using Row = std::tuple<std::string, std::string, bool, std::uint64_t, std::uint64_t>;
  auto rows = [](bool adaptive) {
    AveragerConfig cfg = adaptive_config();
    if (!adaptive) cfg.slow_link_wire.reset();
    Cluster c(6, kD, cfg, 22);
    train(c, Millis(4000));
    std::vector<Row> out;
    for (auto& p : c.peers)
      for (const auto& e : p->events) {
        CHECK(e.wire == WireFormat::Fp32);
        out.emplace_back(p->id, e.partner, e.ok, e.bytes_sent, e.bytes_received);
      }
    for (auto& p : c.peers)
      for (auto& q : c.peers) CHECK_FALSE(p->avg->slow_link(q->id));
    return out;
  };
  const auto on = rows(true), off = rows(false);
  CHECK(on.size() >= 100);
  CHECK(on == off);  // event for event
}

TEST_CASE("a partner that does not adapt refuses the slow wire: fp32 with it from then on",
          "[gossip]") {
  // Peer 3 is slow and runs without adaptation: its partners' int4-rel requests are refused
  // (wire), after which they ask it in fp32 again; nothing is mixed in another wire.
  Cluster c(4, kD, adaptive_config(), 23, {}, [](int i, AveragerConfig& cfg) {
    if (i == 3) cfg.slow_link_wire.reset();
  });
  c.net.set_link(c[3].addr, kSlowBytesPerS, std::nullopt);
  const Run r = train(c, Millis(20000));
  std::size_t ok_with_it = 0;
  for (int i = 0; i < 3; ++i)
    for (const auto& e : c[i].events) {
      if (e.partner != c[3].id || !e.ok) continue;
      CHECK(e.wire == WireFormat::Fp32);
      ++ok_with_it;
    }
  // Each partner proposed int4-rel after its first fp32 exchange measured the link, was refused,
  // and proposes it no more; a refusal that comes after the answer deadline (queued behind a
  // transfer on the slow link) is not read, so a partner may propose it once or twice more.
  const std::uint64_t refused = c[3].avg->stats().refused_sent;
  std::printf("a partner that does not adapt: %llu refusals, %zu fp32 exchanges with it, worst "
              "sum drift %.3e\n",
              static_cast<unsigned long long>(refused), ok_with_it, r.drift);
  CHECK(refused >= 1);
  CHECK(refused <= 9);
  for (int i = 0; i < 3; ++i) CHECK_FALSE(c[i].avg->slow_link(c[3].id));
  CHECK(ok_with_it >= 4);
  CHECK(r.drift < 1e-3);
}

TEST_CASE("the slow link wire's residual survives a checkpoint, as the main wire's does",
          "[gossip]") {
  gt_test::TempDir dir("gt-slow-residual");
  AveragerConfig cfg = adaptive_config();
  cfg.slow_link_wire = WireFormat::Int8;
  Cluster c(3, kD, cfg, 31);
  c.net.set_link(c[2].addr, kSlowBytesPerS, std::nullopt);
  c.train_then_settle(Millis(12000), 10, 3);
  const std::vector<float> residual = c[2].avg->slow_residual();  // every partner of 2 is slow
  REQUIRE(residual.size() == kD);
  double r2 = 0;
  for (float v : residual) r2 += double(v) * v;
  REQUIRE(r2 > 0);  // it exchanged in int8: something was rounded off
  CHECK(c[2].avg->residual().empty());  // fp32 keeps none
  std::vector<float> x = c[2].values(c.be);
  {
    CommState state(dir.path.string(), 0xfeedbeef, *c[2].avg, nullptr);
    core::StepContext ctx{c.be, x.data(), x.size(), 100, 3200, 1000, 0, false};
    state.between_steps(ctx);
    state.save(ctx);
  }
  // A restarted peer: a fresh averager, the same folder.
  Cluster fresh(3, kD, cfg, 32);
  std::vector<float> x2 = fresh[2].values(fresh.be);
  core::StepContext ctx{fresh.be, x2.data(), x2.size(), 100, 3200, 1000, 0, false};
  CommState again(dir.path.string(), 0xfeedbeef, *fresh[2].avg, nullptr);
  again.between_steps(ctx);  // restores, before the averager's buffers exist
  fresh[2].avg->between_steps(ctx);
  CHECK(fresh[2].avg->slow_residual() == residual);
}
