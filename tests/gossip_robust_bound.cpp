// The adaptive bound of robust mixing (RobustBound) on its own, partners that pull the same way
// every time (signflip, stale) refused on the in-memory network, and the partner choice that
// asks slow partners less often.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include "gossip/exchange/exchange_protocol.hpp"
#include "gossip/exchange/partner_choice.hpp"
#include "gossip/exchange/robust_bound.hpp"
#include "tests/gossip_averager_harness.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {

RobustConfig robust_defaults() {
  RobustConfig rc;
  rc.mix = MixMode::Clipped;
  return rc;
}

// Feeds the bound accepted differences of about `norm` from `partners` honest partners in turn.
void warm(RobustBound& b, int n, double norm, int partners, Millis& now) {
  for (int k = 0; k < n; ++k) {
    const double x = norm * (0.8 + 0.4 * ((k * 7) % 5) / 4.0);  // 0.8 .. 1.2 times norm
    const auto j = b.judge(
        "h" + std::to_string(k % partners), x, [] { return 100.0; }, now);
    REQUIRE(j.why.empty());
    b.accepted("h" + std::to_string(k % partners), x);
    now += Millis(100);
  }
}

}  // namespace

TEST_CASE("robust bound: the warm-up clips to a quarter of our norm, refuses beyond it",
          "[gossip]") {
  RobustBound b(robust_defaults());
  Millis now{0};
  int asked = 0;
  auto own = [&] {
    ++asked;
    return 40.0;
  };
  auto j = b.judge("p", 3.0, own, now);
  CHECK(j.why.empty());
  CHECK(j.tau == Approx(10.0));
  CHECK(asked == 1);
  // A sign-flipped vector is about twice our norm from us: refused from the first exchange on.
  CHECK(b.judge("q", 80.0, own, now).why == "warm-up");
  CHECK_FALSE(b.baseline());
}

TEST_CASE("robust bound: a minority of far partners cannot raise B, a change of every partner does",
          "[gossip]") {
  RobustBound b(robust_defaults());
  Millis now{0};
  warm(b, 32, 1.0, 4, now);
  const double b0 = *b.baseline();
  CHECK(b0 == Approx(1.0).epsilon(0.25));
  auto meet = [&](const std::string& partner, double norm) {
    const auto j = b.judge(
        partner, norm, [] { return 1e9; }, now);
    b.accepted(partner, norm);
    now += Millis(100);
    return j;
  };
  // One partner far at every exchange, however often: it has one figure among four, and the
  // median does not follow it.
  for (int k = 0; k < 40; ++k) {
    meet("h0", 1000.0);
    if (k % 4 == 0) meet("h" + std::to_string(1 + k / 4 % 3), 1.0);
  }
  CHECK(*b.baseline() <= 1.25 * b0);
  // Every partner far (the swarm's scale changed, as the two sides of a healed partition find
  // each other): B follows as soon as most of them have been met once.
  for (int k = 0; k < 4; ++k) meet("h" + std::to_string(k), 1000.0);
  CHECK(*b.baseline() == Approx(1000.0));
  CHECK(meet("h1", 1000.0).tau == Approx(3000.0));
}

TEST_CASE("robust bound: a partner identical to us does not collapse the bound", "[gossip]") {
  // Two peers that no longer move (finished, or at the end of a decayed learning rate) exchange
  // many times a second at distance 0 while their other partners, busy training, are met now and
  // then. With a figure per exchange their zeros filled the window: B fell to nothing, and every
  // other partner was clipped to the honest-drift floor (the 8-peer partition run's cliques).
  RobustBound b(robust_defaults());
  Millis now{0};
  warm(b, 32, 1.0, 4, now);
  const double b0 = *b.baseline();
  auto own = [] { return 30.0; };
  for (int k = 0; k < 200; ++k) {
    // Seven exchanges with the twin for one with another partner.
    const std::string partner = k % 8 == 0 ? "h" + std::to_string(k / 8 % 4) : "twin";
    const double norm = partner == "twin" ? 0.0 : 1.0;
    const auto j = b.judge(partner, norm, own, now);
    REQUIRE(j.why.empty());
    b.accepted(partner, norm);
    now += Millis(10);
  }
  // One figure of 0 among five: B is still the other partners' distance.
  CHECK(*b.baseline() >= 0.75 * b0);
  const auto j = b.judge("h1", 1.5, own, now);
  CHECK(j.why.empty());
  CHECK_FALSE(j.suspect);
  CHECK(j.tau >= 1.5);  // not clipped
}

TEST_CASE("robust bound: readings taken just after a pair averaged do not drop B", "[gossip]") {
  // Late in training a pair that has just averaged reads ||r - s|| ~ 0 at its next exchange.
  // With each partner's latest reading as its figure, three such readings out of four partners
  // made B their ~0, and the fourth partner, at its usual distance, was clipped under 0.5
  // (docs/robustness.md, "A transfer held across the split"). Each partner's figure is now the
  // larger of its latest reading and its median in the window.
  RobustBound b(robust_defaults());
  Millis now{0};
  warm(b, 32, 1.0, 4, now);
  const double b0 = *b.baseline();
  auto own = [] { return 30.0; };
  for (int k = 0; k < 3; ++k) {
    const std::string partner = "h" + std::to_string(k);
    REQUIRE(b.judge(partner, 1e-4, own, now).why.empty());
    b.accepted(partner, 1e-4);
    now += Millis(100);
  }
  // B, which the refusal rules compare with, is the latest readings' (unchanged, so an attacker
  // is judged as before); tau is taken from the steadier figures.
  CHECK(*b.baseline() < 0.01 * b0);
  const auto j = b.judge("h3", 1.5, own, now);
  CHECK(j.why.empty());
  CHECK(j.tau >= 1.5);  // not clipped
}

TEST_CASE("robust bound: a partner that fills the window does not become B", "[gossip]") {
  // A partner that floods us with requests while the honest peers are busy: all of the last 32
  // applied exchanges were with it (suspect, clipped, but applied). With B the median over the
  // window's partners, B was its own distance, tau three times that, and its next vector was
  // mixed at full weight. The window now reaches back for three partners.
  RobustConfig rc = robust_defaults();
  rc.suspect_clip = true;  // gossip-peer's default (--suspect-action clip): mixed, not refused
  RobustBound b(rc);
  Millis now{0};
  warm(b, 32, 1.0, 4, now);
  const double b0 = *b.baseline();
  auto own = [] { return 30.0; };
  const double far = 12.6;
  int suspect = 0;
  for (int k = 0; k < 40; ++k) {
    const auto j = b.judge("stale", far, own, now);
    suspect += j.suspect ? 1 : 0;
    if (j.why.empty()) b.accepted("stale", far);
    now += Millis(50);
  }
  CHECK(suspect > 30);
  // The window reaches back to two honest partners: B is theirs.
  CHECK(*b.baseline() <= 1.25 * b0);
  const auto j = b.judge("stale", far, own, now);
  CHECK(j.tau <= 4.0 * b0);  // mixed with a clip of at most 0.32, not 1
}

TEST_CASE("robust bound: a replayed vector stays clipped once the honest peers settle and the "
          "window holds two partners, a far one that moves does not",
          "[gossip]") {
  // 8 peers, one replaying its first snapshot (--fault stale), docs/robustness.md "A stale peer
  // at the end of training". During training the honest partners are many and near, and the
  // stale vector is clipped to nothing. Once they finish they settle (distance 0) and start an
  // exchange every 2 s, while the stale peer, far from everyone, starts one every 100 ms: the
  // window holds two partners, B was the upper of the two (the stale one's own 12.9), and its next
  // vector was mixed at full weight.
  RobustConfig rc = robust_defaults();
  rc.suspect_clip = true;  // gossip-peer's default (--suspect-action clip)
  RobustBound b(rc);
  Millis now{0};
  auto own = [] { return 30.0; };
  auto stale = [&](double norm) {
    b.heard_payload("stale", 42);  // the same bytes every time
    const auto j = b.judge("stale", norm, own, now);
    if (j.why.empty()) b.accepted("stale", norm);
    return j;
  };
  warm(b, 32, 1.0, 6, now);  // training: six honest partners near each other
  for (int k = 0; k < 20; ++k) {  // the stale peer among them
    CHECK(stale(12.6).tau / 12.6 < 0.3);
    const auto h = "h" + std::to_string(k % 6);
    b.heard_payload(h, 1000 + std::uint64_t(k));
    REQUIRE(b.judge(h, 1.0, own, now).why.empty());
    b.accepted(h, 1.0);
    now += Millis(100);
  }
  // Training ends: one honest partner at distance 0 every 2 s, the stale one every 100 ms, for
  // 30 s. Its clip stays under the floor it would have had alone, and fades.
  double worst = 0, last = 1;
  for (int k = 0; k < 300; ++k) {
    if (k % 20 == 0) {
      b.heard_payload("h0", 2000 + std::uint64_t(k));
      REQUIRE(b.judge("h0", 0.0, own, now).why.empty());
      b.accepted("h0", 0.0);
    }
    const auto j = stale(12.9);
    if (j.why.empty()) {
      last = std::min(1.0, j.tau / 12.9);
      if (k >= 10) worst = std::max(worst, last);
    }
    now += Millis(100);
  }
  CHECK(worst < rc.suspect_min_clip);
  CHECK(last < 1e-6);
  // The same distances from a partner whose vector moves (an honest peer left far from its
  // settled side-mate, the odd one of a partition that healed) keep B the upper figure: it is
  // not suspect, and comes closer at full weight.
  RobustBound moving(rc);
  Millis m{0};
  warm(moving, 32, 1.0, 6, m);
  for (int k = 0; k < 300; ++k) {
    if (k % 20 == 0) {
      moving.heard_payload("h0", 2000 + std::uint64_t(k));
      REQUIRE(moving.judge("h0", 0.0, own, m).why.empty());
      moving.accepted("h0", 0.0);
    }
    moving.heard_payload("far", std::uint64_t(k));
    const auto j = moving.judge("far", 12.9, own, m);
    if (j.why.empty()) moving.accepted("far", 12.9);
    m += Millis(100);
  }
  CHECK(moving.judge("far", 12.9, own, m).tau >= 12.9);
  // A partner met for the first time far away (the other side of a partition that healed) is
  // not that: with one near partner, B is its figure and it is mixed at full weight.
  RobustBound heal(rc);
  Millis t{0};
  warm(heal, 32, 1.0, 3, t);
  for (int k = 0; k < 64; ++k) {  // the side settles: one side-mate at distance 0
    REQUIRE(heal.judge("h0", 0.0, own, t).why.empty());
    heal.accepted("h0", 0.0);
    t += Millis(100);
  }
  const auto j = heal.judge("other", 3.8, own, t);
  REQUIRE(j.why.empty());
  heal.accepted("other", 3.8);
  CHECK(heal.judge("other", 1.9, own, t).tau >= 1.9);
}

TEST_CASE("robust bound: a partner far every time is refused, an honest one far once is not",
          "[gossip]") {
  RobustBound b(robust_defaults());
  Millis now{0};
  warm(b, 32, 1.0, 4, now);
  auto own = [] { return 30.0; };  // floor: 0.05 * 30 = 1.5
  // An honest partner with one large difference (a straggler catching up): clipped, not refused.
  CHECK(b.judge("h0", 2.9, own, now).why.empty());
  CHECK(b.judge("h0", 0.9, own, now).why.empty());
  CHECK(b.judge("h0", 3.1, own, now).why.empty());
  // A partner three times as far as the others at every exchange: the first suspect_min - 1
  // exchanges are clipped to tau, then it is refused as persistent while it stays far.
  std::vector<std::string> why;
  for (int k = 0; k < 6; ++k) {
    why.push_back(b.judge("bad", 3.0, own, now).why);
    now += Millis(100);
  }
  CHECK(why ==
        std::vector<std::string>{"", "", "persistent", "persistent", "persistent", "persistent"});
  // The same ratios below the floor (the end of training, B collapsed): never refused.
  RobustBound small(robust_defaults());
  Millis t{0};
  warm(small, 32, 0.001, 4, t);
  for (int k = 0; k < 6; ++k) CHECK(small.judge("lag", 0.003, own, t).why.empty());
  // Records older than suspect_age are forgotten: a partner far a minute ago starts afresh.
  now += Millis(61000);
  CHECK(b.judge("bad", 3.0, own, now).why.empty());
}

// A bound with suspect_clip, past its warm-up (B from 32 norms of 1 over 4 partners).
struct WarmClipBound {
  static RobustConfig config() {
    RobustConfig rc = robust_defaults();
    rc.suspect_clip = true;
    return rc;
  }
  RobustBound b{config()};
  Millis now{0};
  double base = 0;
  WarmClipBound() {
    warm(b, 32, 1.0, 4, now);
    base = *b.baseline();
  }
};

TEST_CASE("robust bound: with suspect_clip a persistent partner is clipped to B, not refused",
          "[gossip]") {
  WarmClipBound w;
  RobustBound& b = w.b;
  Millis& now = w.now;
  const double base = w.base;
  auto own = [] { return 30.0; };
  std::vector<bool> suspect;
  std::vector<double> taus;
  for (int k = 0; k < 5; ++k) {
    const auto j = b.judge("far", 3.0, own, now);
    CHECK(j.why.empty());
    suspect.push_back(j.suspect);
    taus.push_back(j.tau / base);
    now += Millis(100);
  }
  CHECK(suspect == std::vector<bool>{false, false, true, true, true});
  // Not yet suspect: 3 B. Then B, halved for each further suspect exchange in a row.
  CHECK(taus[0] == Approx(3));
  CHECK(taus[1] == Approx(3));
  CHECK(taus[2] == Approx(1));
  CHECK(taus[3] == Approx(0.5));
  CHECK(taus[4] == Approx(0.25));
}

TEST_CASE("robust bound: a suspect partner that comes closer leaves suspicion and its streak ends",
          "[gossip]") {
  WarmClipBound w;
  const double base = w.base;
  auto own = [] { return 30.0; };
  auto step = [&](double norm) {
    const auto j = w.b.judge("p", norm, own, w.now);
    w.now += Millis(100);
    return j;
  };
  for (int k = 0; k < 4; ++k) step(3.0);
  CHECK(step(3.0).streak == 3);  // 3rd suspect exchange in a row: B / 4
  // Close again, as an honest peer restarted from an old checkpoint is after it has averaged:
  // once its median ratio is back down, it is no longer suspect and its clip is 3 B again.
  RobustBound::Judgement j;
  for (int k = 0; k < 3; ++k) j = step(1.0);
  CHECK_FALSE(j.suspect);
  CHECK(j.tau == Approx(3 * base));
  // Far again later: a new streak starts at B, not where the old one ended.
  for (int k = 0; k < 2; ++k) step(3.0);
  j = step(3.0);
  REQUIRE(j.suspect);
  CHECK(j.streak == 1);
  CHECK(j.tau == Approx(base));
}

TEST_CASE(
    "robust bound: a persistent clip recovers when the partner comes closer, and a gap "
    "partner's stops at the honest-drift floor",
    "[gossip]") {
  WarmClipBound w;
  const double base = w.base;
  auto own = [] { return 30.0; };
  auto step = [&](const std::string& partner, double norm) {
    const auto j = w.b.judge(partner, norm, own, w.now);
    w.now += Millis(100);
    return j;
  };
  // Far every time: the clip decays from B, streak after streak (a stale vector).
  RobustBound::Judgement j;
  for (int k = 0; k < 16; ++k) j = step("p", 3.0);
  REQUIRE(j.suspect);
  CHECK(j.streak == 14);
  CHECK(j.tau == Approx(base * std::pow(0.5, 13)));
  // Closer by more than a tenth since its streak began (as an honest peer that averages comes):
  // a new streak, the clip back at B, while its median ratio still keeps it suspect. Before,
  // the streak went on and its clip stayed near nothing.
  j = step("p", 2.6);
  REQUIRE(j.suspect);
  CHECK(j.streak == 1);
  CHECK(j.tau == Approx(base));
  j = step("p", 2.6);
  CHECK(j.streak == 2);
  CHECK(j.tau == Approx(base / 2));
  // Not closer than 0.9 times where the new streak began: the streak goes on.
  j = step("p", 2.5);
  CHECK(j.streak == 3);
  // Close: out of suspicion, the usual 3 B.
  for (int k = 0; k < 3; ++k) j = step("p", 1.0);
  CHECK_FALSE(j.suspect);
  CHECK(j.tau == Approx(3 * base));

  // A partner far behind in steps: its clip does not fade below suspect_min_clip (0.02).
  w.b.set_own_step(5000);
  w.b.heard_step("joiner", 10, w.now);
  for (int k = 0; k < 16; ++k) j = step("joiner", 3.0);
  REQUIRE(j.suspect);
  CHECK(j.gap);
  CHECK(j.floored);
  CHECK(j.tau / 3.0 == Approx(0.02));
  CHECK(j.tau / 3.0 >= kAveragingClip);
}

TEST_CASE("robust bound: in the warm-up, far from every partner met, we may be the odd one out: "
          "clipped, not refused",
          "[gossip]") {
  // Three NumPy peers from zero weights trained alone for hundreds of steps before their first
  // exchange: the one with the smallest norm found both others beyond it, refused and banned them
  // (docs/python.md). The first far partner is refused, as before; once a second is as far and
  // none was near, the distance says more about us than about them.
  auto own = [] { return 4.0; };
  Millis now{0};
  RobustBound alone(robust_defaults());
  CHECK(alone.judge("a", 6.0, own, now).why == "warm-up");
  RobustBound::Judgement j = alone.judge("b", 6.5, own, now);
  CHECK(j.why.empty());
  CHECK(j.suspect);
  CHECK(j.odd);
  CHECK(j.tau == Approx(1.0));  // the warm-up's quarter of our norm, first of its streak
  j = alone.judge("a", 6.0, own, now);
  CHECK(j.why.empty());
  CHECK(j.odd);
  // Beyond refuse_mult times our norm it is refused whatever else was met.
  CHECK(alone.judge("c", 41.0, own, now).why == "warm-up");

  // A partner near us first: the far ones are the odd ones, and each is refused.
  RobustBound met(robust_defaults());
  CHECK(met.judge("h", 0.5, own, now).why.empty());
  CHECK(met.judge("a", 6.0, own, now).why == "warm-up");
  j = met.judge("b", 6.5, own, now);
  CHECK(j.why == "warm-up");
  CHECK_FALSE(j.odd);
}

TEST_CASE("robust bound: in a swarm of three a persistently far partner keeps a clip of "
          "suspect_min_clip, with more partners to compare it fades as before",
          "[gossip]") {
  // Three hosts, one of them a moment late: the two others, close to each other, found it
  // persistently far, and it found them equally far, so no suspicion was mutual. Its clip halved
  // to 1e-12 and, kept from mixing, it stayed far for good (the three-host test failed in about
  // 1 run of 6). With two partners nothing shows which of us is the odd one out.
  RobustConfig rc = robust_defaults();
  rc.suspect_clip = true;
  auto own = [] { return 30.0; };
  auto drift_away = [&](RobustBound& b, Millis& now) {
    RobustBound::Judgement j;
    for (int k = 0; k < 40; ++k) {
      j = b.judge("late", 2.5 + 0.05 * k, own, now);  // drifting away, as it did
      now += Millis(100);
    }
    return j;
  };
  Millis now{0};
  RobustBound three(rc);
  warm(three, 32, 1.0, 1, now);  // one other partner: a swarm of three
  RobustBound::Judgement j = drift_away(three, now);
  REQUIRE(j.suspect);
  CHECK_FALSE(j.gap);
  CHECK(j.floored);
  CHECK(j.tau / (2.5 + 0.05 * 39) == Approx(0.02));
  CHECK(j.tau / (2.5 + 0.05 * 39) >= kAveragingClip);

  Millis later{0};
  RobustBound eight(rc);
  warm(eight, 32, 1.0, 4, later);  // four others that agree: this one is the odd one (stale)
  j = drift_away(eight, later);
  REQUIRE(j.suspect);
  CHECK_FALSE(j.floored);
  CHECK(j.tau / (2.5 + 0.05 * 39) < 1e-6);
}

TEST_CASE("robust bound: a joiner far behind in steps and the peer it joins accept each other",
          "[gossip]") {
  // The numbers: a joiner from random weights is 34 from a peer whose ||s|| is 11.5.
  auto judge_all = [](RobustBound& b, const std::string& partner, double norm, double own_norm,
                      int n) {
    std::vector<RobustBound::Judgement> out;
    Millis now{0};
    for (int k = 0; k < n; ++k) {
      out.push_back(b.judge(
          partner, norm, [&] { return own_norm; }, now));
      now += Millis(100);
    }
    return out;
  };
  SECTION("the joiner does not refuse the peer ahead of it") {
    RobustBound joiner(robust_defaults());
    joiner.set_own_step(0);
    joiner.heard_step("ahead", 11376, Millis(0));
    const auto js = judge_all(joiner, "ahead", 34.0, 30.0, 12);
    for (const auto& j : js) {
      CHECK(j.why.empty());
      CHECK(j.suspect);
      CHECK(j.gap);
      CHECK(j.tau / 34.0 >= 0.02 * 30.0 / 34.0 - 1e-12);  // the floor
    }
    CHECK(js[0].tau == Approx(0.25 * 30.0));  // its warm-up tau, then decaying
    CHECK(js[1].tau == Approx(0.25 * 30.0 / 2));
  }
  SECTION("the peer ahead does not refuse the joiner either: the pair can average") {
    RobustBound ahead(robust_defaults());
    ahead.set_own_step(11376);
    ahead.heard_step("joiner", 3, Millis(0));
    for (const auto& j : judge_all(ahead, "joiner", 34.0, 11.5, 12)) CHECK(j.why.empty());
  }
  SECTION("without a gap the same distance is refused, as before") {
    RobustBound b(robust_defaults());
    b.set_own_step(11376);
    b.heard_step("peer", 11000, Millis(0));
    CHECK(judge_all(b, "peer", 34.0, 11.5, 1)[0].why == "warm-up");
    RobustBound unknown(robust_defaults());  // steps never told: no gap
    CHECK(judge_all(unknown, "peer", 34.0, 11.5, 1)[0].why == "warm-up");
  }
  SECTION("a gap does not explain a vector many times our own norm away") {
    RobustBound b(robust_defaults());
    b.set_own_step(11376);
    b.heard_step("liar", 0, Millis(0));
    CHECK(judge_all(b, "liar", 1000 * 11.5, 11.5, 1)[0].why == "warm-up");
  }
  SECTION("after the warm-up: far is clipped with a gap, refused without") {
    RobustBound b(robust_defaults());
    Millis now{0};
    warm(b, 32, 1.0, 4, now);
    b.set_own_step(5000);
    b.heard_step("joiner", 10, now);
    b.heard_step("peer", 4900, now);
    auto own = [] { return 30.0; };
    const auto j = b.judge("joiner", 60.0, own, now);  // beyond 10 tau and ||s||, within 10 ||s||
    CHECK(j.why.empty());
    CHECK(j.suspect);
    CHECK(b.judge("peer", 60.0, own, now).why == "far");
    // Persistently far with a gap, in refuse mode (suspect_clip off): clipped, not refused.
    for (int k = 0; k < 5; ++k) CHECK(b.judge("joiner", 3.0, own, now += Millis(100)).why.empty());
  }
  SECTION("no gap below gap_min_steps, however small the steps") {
    RobustBound b(robust_defaults());
    b.set_own_step(40);
    b.heard_step("early", 2, Millis(0));
    CHECK(judge_all(b, "early", 34.0, 11.5, 1)[0].why == "warm-up");
  }
}

TEST_CASE("robust bound: a suspect_decay not in 0 < d <= 1 is refused", "[gossip]") {
  RobustConfig rc = robust_defaults();
  for (double d : {0.0, -0.5, 1.5}) {
    rc.suspect_decay = d;
    CHECK_THROWS_AS(validate(rc), std::invalid_argument);
  }
  rc.suspect_decay = 1.0;
  CHECK_NOTHROW(validate(rc));
}

TEST_CASE("robust bound: far beyond tau and our own norm is refused at once", "[gossip]") {
  RobustBound b(robust_defaults());
  Millis now{0};
  warm(b, 16, 1.0, 4, now);
  CHECK(b.judge(
             "x", 50.0, [] { return 30.0; }, now)
            .why == "far");
  // Beyond 10 tau but closer than our own norm: not "far" (only persistent partners are refused).
  CHECK(b.judge(
             "y", 25.0, [] { return 30.0; }, now)
            .why.empty());
  RobustConfig bad = robust_defaults();
  bad.suspect_min = 9;  // more than suspect_window
  CHECK_THROWS_AS(RobustBound(bad), std::invalid_argument);
}

namespace {

// 4 peers on the in-memory network, peer 3 faulty; every millisecond every peer "trains": all
// move the same way (drift) plus a little noise of their own, so the honest peers stay close
// while a stale snapshot falls further behind. Returns the anomalous refusals by partner.
struct FaultRun {
  std::map<std::string, int> refused_by_partner;  // honest peers' anomalous refusals
  int bans_of_faulty = 0, bans_of_honest = 0;
  int honest_mixed_faulty = 0;  // exchanges of honest peers with peer 3 that went through
  int honest_ok = 0;            // all the exchanges of honest peers that went through
};

FaultRun run_with_fault(const std::string& mode) {
  AveragerConfig cfg;
  cfg.gossip_every = 1;
  cfg.fingerprint = 0xfeedbeef;
  cfg.transfer_timeout_floor = Millis(2000);
  cfg.robust.mix = MixMode::Clipped;
  cfg.robust.ban_base = Millis(100000);
  constexpr std::size_t kN = 1000;
  Cluster c(4, kN, cfg, 21, {}, [&](int i, AveragerConfig& pc) {
    if (i == 3) pc.fault = parse_fault(mode);
  });
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 1e-3f);
  for (std::size_t i = 0; i < 4; ++i) {
    std::vector<float> v(kN);
    for (std::size_t k = 0; k < kN; ++k) v[k] = 0.5f + 0.1f * float(k % 9) + noise(rng);
    c.be.upload(c[i].x.data(), v.data(), kN * sizeof(float));
  }
  FaultRun r;
  for (int i = 0; i < 3; ++i)
    c[std::size_t(i)].avg->set_ban_callback(
        [&](const BanEvent& b) { (b.partner == c[3].id ? r.bans_of_faulty : r.bans_of_honest)++; });
  auto tick = [&] {
    for (std::size_t i = 0; i < 4; ++i) {
      auto v = c[i].values(c.be);
      for (std::size_t k = 0; k < kN; ++k) v[k] += (k % 2 ? 2e-3f : -2e-3f) + noise(rng);
      c.be.upload(c[i].x.data(), v.data(), kN * sizeof(float));
      c[i].step_hook(c.be);
    }
  };
  c.run_until([] { return false; }, Millis(3000), tick);
  for (int i = 0; i < 3; ++i)
    for (const auto& e : c[std::size_t(i)].events) {
      if (e.reason() == "anomalous") r.refused_by_partner[e.partner]++;
      if (e.ok && e.partner == c[3].id) r.honest_mixed_faulty++;
      if (e.ok) r.honest_ok++;
    }
  return r;
}

}  // namespace

TEST_CASE("a signflip or stale partner is refused and banned, no honest one is banned",
          "[gossip]") {
  const std::string mode = GENERATE("signflip", "stale");
  INFO(mode);
  const FaultRun r = run_with_fault(mode);
  INFO("honest exchanges with the faulty peer that went through: " << r.honest_mixed_faulty);
  int honest_refusals = 0;
  for (const auto& [p, k] : r.refused_by_partner) {
    UNSCOPED_INFO(p << " refused " << k << " times");
    if (p != "peer-3") honest_refusals += k;
  }
  // Each honest peer refused it at least 3 times and banned it (the ban outlasts the run).
  REQUIRE(r.refused_by_partner.count("peer-3") == 1);
  CHECK(r.refused_by_partner.at("peer-3") >= 9);
  CHECK(r.bans_of_faulty == 3);
  // An honest peer that mixed with the stale one before it was found out is itself a little
  // off for a while and may be refused once or twice (2 in the run this was written against),
  // never banned.
  CHECK(r.bans_of_honest == 0);
  CHECK(honest_refusals < 6);
  // signflip is refused from its first exchange (twice our norm away); a stale snapshot once it
  // has fallen behind (11 exchanges went through in the run this was written against, most of
  // them in the warm-up, whose tau is a quarter of our norm). Since requests are held behind a
  // transfer instead of answered BUSY (ExchangeConfig::hold_max) this run averages more often
  // (494 exchanges of honest peers against 379 with hold_max 0) and 17 went through against 13:
  // the same share, about 3.4%. It falls behind in steps, not in exchanges.
  INFO("honest exchanges that went through: " << r.honest_ok);
  if (mode == "signflip") CHECK(r.honest_mixed_faulty == 0);
  else CHECK(r.honest_mixed_faulty <= 22);
  CHECK(r.honest_mixed_faulty <= r.honest_ok / 20);
}

TEST_CASE("partner choice: a slow partner is asked rarely but not never, deterministically",
          "[gossip]") {
  PartnerChoice pc;
  const Millis now{0};
  std::vector<PeerRef> cands;
  for (int i = 0; i < 7; ++i) cands.push_back({"p" + std::to_string(i), "a"});
  // Nothing recorded: uniform.
  base::ProtocolRng rng(1);
  std::map<std::size_t, int> n;
  for (int k = 0; k < 7000; ++k) n[pc.pick(cands, rng)]++;
  for (auto& [i, k] : n) CHECK(k > 800);
  // p2 took 3 s per exchange, the others 40-120 ms (within 3 times the median: all weight 1).
  for (int i = 0; i < 7; ++i) pc.record(cands[std::size_t(i)].id, i == 2 ? 3000 : 40 + 13 * i, now);
  CHECK(pc.weight("p0", 79) == 1.0);
  CHECK(pc.weight("p2", 79) == Approx(std::pow(3 * 79 / 3000.0, 2)));
  auto draw = [&](std::uint64_t seed) {
    base::ProtocolRng g(seed);
    std::vector<std::size_t> v;
    for (int k = 0; k < 20000; ++k) v.push_back(pc.pick(cands, g));
    return v;
  };
  const auto a = draw(7);
  CHECK(a == draw(7));  // the same seed and records: the same choices
  std::map<std::size_t, int> m;
  for (auto i : a) m[i]++;
  CHECK(m[2] > 0);  // not orphaned: about 20000 * 0.0062 / 6.0062 = 21 picks
  CHECK(m[2] < 60);
  for (std::size_t i : {0u, 1u, 3u, 4u, 5u, 6u}) CHECK(m[i] > 2900);
  // Its link recovers: a few fast exchanges bring it back.
  for (int k = 0; k < 12; ++k) pc.record("p2", 50, now);
  CHECK(pc.weight("p2", 79) == 1.0);
  pc.record("p9", -1, now);  // nonsense durations are ignored
  CHECK(pc.cost("p9") == -1);
}
