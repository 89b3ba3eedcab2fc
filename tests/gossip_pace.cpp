// PaceKeeper (--max-ahead): who is waited for, the extrapolation at our own rate, and what is
// ignored (finished, far behind, unknown, forgotten partners).
#include <catch2/catch.hpp>

#include "gossip/node/pace.hpp"

using gossiptrain::gossip::PaceConfig;
using gossiptrain::gossip::PaceKeeper;

namespace {

// Our own rate made 0.01 of the run per second: two samples a second apart.
void set_rate(PaceKeeper& k) {
  k.trained(0.10, 0.0);
  k.trained(0.11, 1.0);
}

}  // namespace

TEST_CASE("pace: nobody heard from, nothing to wait for", "[gossip]") {
  PaceKeeper k(PaceConfig{});
  CHECK(k.ahead(0.5, 0.0) == 0.0);
  CHECK_FALSE(k.should_wait(0.5, 0.0));
  CHECK(k.rate() == 0.0);
}

TEST_CASE("pace: a partner behind by more than max_ahead is waited for until it catches up",
          "[gossip]") {
  PaceKeeper k(PaceConfig{});
  set_rate(k);
  CHECK(k.rate() == Approx(0.01));
  k.heard("slow", 0.05, 1.0);
  k.heard("fast", 0.20, 1.0);
  CHECK(k.ahead(0.11, 1.0) == Approx(0.06));
  CHECK(k.should_wait(0.11, 1.0));  // 0.06 > 0.02
  // It moves on at our rate meanwhile: at t = 5 it is estimated at 0.09, within 0.02 of us.
  CHECK(k.ahead(0.11, 5.0) == Approx(0.02));
  CHECK(k.should_wait(0.11, 4.5));
  CHECK_FALSE(k.should_wait(0.11, 5.5));
  // Its next word counts, whatever the estimate said.
  k.heard("slow", 0.06, 5.5);
  CHECK(k.should_wait(0.11, 5.5));
  k.heard("slow", 0.10, 6.0);
  CHECK_FALSE(k.should_wait(0.11, 6.0));
}

TEST_CASE("pace: a word causes one wait at most, the partner's next word counts again",
          "[gossip]") {
  // Rate unknown (0): nothing moves a partner's estimate on, as at the start of a run.
  PaceKeeper k(PaceConfig{});
  k.heard("slow", 0.0, 0.0);
  k.heard("slower", 0.01, 0.0);
  CHECK(k.should_wait(0.05, 0.5));
  k.resumed(0.05, 2.5);  // waited 2 s without hearing from them
  CHECK_FALSE(k.should_wait(0.05, 2.5));
  CHECK_FALSE(k.should_wait(0.06, 3.0));
  k.heard("slower", 0.02, 3.0);
  CHECK(k.should_wait(0.06, 3.0));
  CHECK(k.ahead(0.06, 3.0) == Approx(0.04));  // "slow" is spent, "slower" is fresh
}

TEST_CASE("pace: finished, far behind, unknown and forgotten partners are not waited for",
          "[gossip]") {
  PaceKeeper k(PaceConfig{.max_ahead = 0.02, .ignore_behind = 0.10, .window_s = 10.0});
  set_rate(k);
  k.heard("done", 1.0, 1.0);       // finished: lingering, never catches up
  k.heard("restarted", 0.0, 1.0);  // 0.5 behind: catching up, not to be waited for
  k.heard("unknown", -1.0, 1.0);   // a peer that does not say
  CHECK(k.ahead(0.5, 1.0) == 0.0);
  k.heard("close", 0.45, 1.0);
  CHECK(k.should_wait(0.5, 1.0));
  CHECK(k.ahead(0.5, 1.0) == Approx(0.05));
  // Ten seconds later its word is forgotten (and at our rate it would have caught up anyway).
  CHECK_FALSE(k.should_wait(0.5, 11.5));
  // A new word from a partner drops the silent ones from the table too.
  k.heard("other", 0.49, 12.0);
  CHECK(k.ahead(0.5, 12.0) == Approx(0.01));
}

// A partition run (docs/robustness.md): one peer trained 35% faster than its side, got more than
// ignore_behind ahead of all three side-mates, so none of them held it any more; it finished and
// left before the heal. Two or more partners far behind and none near: we ran away.
TEST_CASE("pace: ahead of two or more partners by more than ignore_behind, none near, a peer waits "
          "for the front of them",
          "[gossip]") {
  PaceKeeper k(PaceConfig{.max_ahead = 0.02, .ignore_behind = 0.10, .window_s = 10.0});
  set_rate(k);
  k.heard("a", 0.30, 1.0);
  CHECK_FALSE(k.should_wait(0.5, 1.0));  // one far behind: a straggler
  k.heard("b", 0.36, 1.0);
  k.heard("c", 0.33, 1.0);
  CHECK(k.should_wait(0.5, 1.0));
  CHECK(k.ahead(0.5, 1.0) == Approx(0.14));  // the front of them, b
  k.heard("d", 0.45, 1.0);                   // one near: the far ones are stragglers again
  CHECK(k.ahead(0.5, 1.0) == Approx(0.05));
  k.heard("e", 1.0, 1.0);  // a finished partner changes nothing
  CHECK(k.ahead(0.5, 1.0) == Approx(0.05));
}

TEST_CASE("pace: the rate ignores waiting and restarts from a restored step", "[gossip]") {
  PaceKeeper k(PaceConfig{});
  set_rate(k);
  // Waited 3 s at 0.11 (serving exchanges): resumed() restarts the sample, so the rate stays.
  k.resumed(0.11, 4.0);
  k.trained(0.12, 5.0);
  CHECK(k.rate() == Approx(0.01));
  // Samples closer than 0.2 s apart are merged into the next one.
  k.trained(0.125, 5.1);
  CHECK(k.rate() == Approx(0.01));
  // Restored to an earlier step (a checkpoint): the next sample starts there.
  k.trained(0.02, 6.0);
  CHECK(k.rate() == Approx(0.01));
  k.trained(0.04, 7.0);
  CHECK(k.rate() == Approx(0.7 * 0.01 + 0.3 * 0.02));
}

TEST_CASE("pace: a partner slower than us is extrapolated at its own rate", "[gossip]") {
  PaceKeeper k(PaceConfig{});
  set_rate(k);  // ours: 0.01 a second
  // Its words 1 s apart: 0.002 a second, a fifth of ours.
  k.heard("slow", 0.050, 1.0);
  k.heard("slow", 0.052, 2.0);
  // At our rate it would be at 0.082 by t = 5 and we, at 0.11, would stop waiting at t = 4.8; at
  // its own it is at 0.058, and we wait.
  CHECK(k.ahead(0.11, 5.0) == Approx(0.11 - 0.058));
  CHECK(k.should_wait(0.11, 5.0));
  // A partner faster than us is still moved on at our rate (we cannot know more of it).
  PaceKeeper f(PaceConfig{});
  set_rate(f);
  f.heard("quick", 0.00, 1.0);
  f.heard("quick", 0.05, 2.0);  // 0.05 a second
  CHECK(f.ahead(0.11, 3.0) == Approx(0.11 - 0.06));
  // A restarted partner (its progress went back) starts over without a rate.
  f.heard("quick", 0.01, 3.0);
  CHECK(f.ahead(0.11, 4.0) == Approx(0.11 - 0.02));
}

TEST_CASE("pace: a partner membership cannot reach is not waited for until it speaks again",
          "[gossip]") {
  PaceKeeper k(PaceConfig{});
  set_rate(k);
  k.heard("cut-off", 0.05, 1.0);  // the other side of a partition
  k.heard("near", 0.10, 1.0);
  CHECK(k.should_wait(0.11, 1.0));
  k.unreachable("cut-off");  // suspected: its stale word holds nobody
  k.unreachable("never-heard");
  CHECK_FALSE(k.should_wait(0.11, 1.0));
  CHECK(k.ahead(0.11, 1.0) == Approx(0.01));
  k.heard("cut-off", 0.06, 2.0);  // back (a heal): it counts again
  CHECK(k.should_wait(0.11, 2.0));
}
