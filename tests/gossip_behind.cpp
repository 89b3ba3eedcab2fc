// BehindWatch (--catch-up-behind): when a peer far behind the swarm asks to catch up, and when a
// slow peer that still averages, a single far partner or old news does not make it.
#include <catch2/catch.hpp>

#include "gossip/node/behind.hpp"

using gossiptrain::gossip::BehindConfig;
using gossiptrain::gossip::BehindWatch;
using Ids = std::vector<std::string>;

TEST_CASE("behind: partners well ahead that clip us away ask for a catch-up, furthest first",
          "[gossip]") {
  BehindWatch w(BehindConfig{});
  CHECK(w.far_ahead(0.2, 0.0).empty());  // nobody heard
  w.exchanged("a", 0.9, /*clip=*/1e-9, 1.0, 1.0);
  CHECK(w.far_ahead(0.2, 1.0).empty());  // one partner may be a liar claiming to be done
  w.exchanged("b", 1.0, 1e-9, 1.0, 2.0);
  CHECK(w.far_ahead(0.2, 2.0) == Ids{"b", "a"});
  // Our progress unknown: nothing to compare.
  CHECK(w.far_ahead(-1.0, 2.0).empty());
  // Not that far ahead (under `behind` of the run): averaging will do.
  CHECK(w.far_ahead(0.85, 2.0).empty());
}

TEST_CASE("behind: a slow peer that still averages, or a far minority, does not catch up",
          "[gossip]") {
  BehindWatch w(BehindConfig{});
  SECTION("the far partners averaged with us") {
    w.exchanged("a", 0.9, 1.0, 1.0, 1.0);
    w.exchanged("b", 0.9, 1.0, 1.0, 1.0);
    CHECK(w.far_ahead(0.2, 1.0).empty());
  }
  SECTION("two far of five partners heard: a majority is near") {
    w.exchanged("a", 0.9, 1e-9, 1.0, 1.0);
    w.exchanged("b", 0.9, 1e-9, 1.0, 1.0);
    w.exchanged("c", 0.25, 1.0, 1.0, 1.0);
    w.exchanged("d", 0.22, 1.0, 1.0, 1.0);
    w.exchanged("e", 0.21, 1e-9, 1.0, 1.0);  // near and clipped (a Byzantine neighbour): near all the same
    CHECK(w.far_ahead(0.2, 1.0).empty());
    SECTION("once the near ones are old news, the far ones decide") {
      w.exchanged("a", 0.95, 1e-9, 1.0, 12.0);
      w.exchanged("b", 0.95, 1e-9, 1.0, 12.0);
      CHECK(w.far_ahead(0.2, 12.0) == Ids{"a", "b"});
    }
  }
  SECTION("a partner heard again, averaging now, no longer counts as clipping us") {
    w.exchanged("a", 0.9, 1e-9, 1.0, 1.0);
    w.exchanged("b", 0.9, 1e-9, 1.0, 1.0);
    w.exchanged("b", 0.91, 1.0, 1.0, 1.5);
    CHECK(w.far_ahead(0.2, 1.5).empty());
  }
}

TEST_CASE("behind: old news is forgotten, a try quiets the watch, 0 is off", "[gossip]") {
  BehindConfig c;
  c.window_s = 10;
  c.after_try_s = 30;
  BehindWatch w(c);
  w.exchanged("a", 1.0, 1e-9, 1.0, 0.0);
  w.exchanged("b", 1.0, 1e-9, 1.0, 0.0);
  CHECK(w.far_ahead(0.2, 10.0).size() == 2);
  CHECK(w.far_ahead(0.2, 10.5).empty());  // both older than the window

  w.exchanged("a", 1.0, 1e-9, 1.0, 20.0);
  w.exchanged("b", 1.0, 1e-9, 1.0, 20.0);
  REQUIRE(w.far_ahead(0.2, 20.0).size() == 2);
  w.tried(20.0);
  CHECK(w.far_ahead(0.2, 20.0).empty());  // forgotten
  w.exchanged("a", 1.0, 1e-9, 1.0, 25.0);
  w.exchanged("b", 1.0, 1e-9, 1.0, 25.0);
  CHECK(w.far_ahead(0.2, 25.0).empty());  // quiet for after_try_s
  w.exchanged("a", 1.0, 1e-9, 1.0, 50.5);
  w.exchanged("b", 1.0, 1e-9, 1.0, 50.5);
  CHECK(w.far_ahead(0.2, 50.5) == Ids{"a", "b"});

  c.behind = 0;
  BehindWatch off(c);
  off.exchanged("a", 1.0, 1e-9, 1.0, 0.0);
  off.exchanged("b", 1.0, 1e-9, 1.0, 0.0);
  CHECK(off.far_ahead(0.0, 0.0).empty());
}

TEST_CASE("behind: a finished peer apart from the swarm, and the finished partners to take a state "
          "from",
          "[gossip]") {
  BehindWatch w(BehindConfig{});
  CHECK_FALSE(w.apart(0.0));
  // Training partners clip it away (under half the weight): apart, but nobody finished to take
  // a state from yet.
  w.exchanged("a", 0.6, 0.3, 1.0, 1.0);
  w.exchanged("b", 0.62, 0.05, 1.0, 1.0);
  w.exchanged("c", 0.61, 1.0, 1.0, 1.0);
  CHECK(w.apart(1.0));
  CHECK(w.ran_ahead(1.0, 1.0));  // we are done, they are at 60%
  CHECK_FALSE(w.ran_ahead(0.65, 1.0));  // not that far ahead of them
  CHECK(w.finished_apart(1.0).empty());
  // They finish and clip it away still: enough to take one's state.
  w.exchanged("a", 1.0, 1e-6, 1.0, 5.0);
  CHECK(w.finished_apart(5.0).empty());  // one finished of three heard
  w.exchanged("b", 1.0, 1e-6, 1.0, 6.0);
  CHECK(w.finished_apart(6.0) == Ids{"a", "b"});
  CHECK_FALSE(w.ran_ahead(1.0, 6.0));  // they are done too (c, heard at 60%, mixed with us)
  // Partners that mix with it at full weight: not apart.
  w.exchanged("a", 1.0, 1.0, 1.0, 7.0);
  w.exchanged("b", 1.0, 1.0, 1.0, 7.0);
  CHECK_FALSE(w.apart(7.0));
  CHECK(w.finished_apart(7.0).empty());
  // Settling peers: distances of 1e-4, which the bound clips hard; close all the same.
  w.exchanged("a", 1.0, 0.02, 1e-4, 8.0);
  w.exchanged("b", 1.0, 0.05, 1e-4, 8.0);
  CHECK_FALSE(w.apart(8.0));
  CHECK(w.finished_apart(8.0).empty());
  // Nobody heard within the window: not apart (nothing says so).
  CHECK_FALSE(w.apart(30.0));
  // A state taken at the end forgets what was heard, without the quiet of a catch-up mid-run:
  // partners that clip the copy away again (it was taken while they settled) say so at once.
  w.exchanged("a", 1.0, 1e-6, 1.0, 31.0);
  w.exchanged("b", 1.0, 1e-6, 1.0, 31.0);
  REQUIRE(w.finished_apart(31.0) == Ids{"a", "b"});
  w.tried(31.0, 0.0);
  CHECK(w.finished_apart(31.0).empty());  // forgotten
  w.exchanged("a", 1.0, 1e-6, 0.2, 32.0);
  CHECK(w.finished_apart(32.0).empty());  // one heard since
  w.exchanged("b", 1.0, 1e-6, 0.2, 32.5);
  CHECK(w.finished_apart(32.5) == Ids{"a", "b"});
}

TEST_CASE("behind: a finished peer ahead of a swarm still training, clipped or not", "[gossip]") {
  BehindWatch w(BehindConfig{});
  w.exchanged("a", 0.5, 1.0, 1.0, 1.0);  // mixing with us at full weight
  CHECK_FALSE(w.ahead_of_swarm(1.0, 1.0));  // one partner is not a swarm
  w.exchanged("b", 0.6, 0.3, 1.0, 1.0);
  CHECK(w.ahead_of_swarm(1.0, 1.0));
  CHECK_FALSE(w.ahead_of_swarm(0.65, 1.0));  // within 10% of the run of b
  w.exchanged("c", 0.95, 1.0, 1.0, 1.0);
  w.exchanged("d", 1.0, 1.0, 1.0, 1.0);
  CHECK_FALSE(w.ahead_of_swarm(1.0, 1.0));  // two of four: not most
  CHECK_FALSE(w.ahead_of_swarm(-1.0, 1.0));
  CHECK_FALSE(w.ahead_of_swarm(1.0, 20.0));  // all old news
}
