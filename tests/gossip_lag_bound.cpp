// --max-lag's policy (LagBound): a wait every max_lag steps without an averaging exchange, the time
// budget that keeps the waits a bounded share of training, and the backoff that stops training
// waiting for exchanges that cannot succeed.
#include <catch2/catch.hpp>

#include <vector>

#include "gossip/node/lag_bound.hpp"

using namespace gossiptrain::gossip;

TEST_CASE("lag bound: waits every max_lag steps while nothing averages, then backs off",
          "[gossip]") {
  LagBound lb({4});
  std::vector<std::int64_t> waits;
  int warnings = 0;
  for (std::int64_t step = 1; step <= 2000; ++step) {
    if (!lb.should_wait(step, 0, step * 1e-3)) continue;
    waits.push_back(step);
    warnings += lb.waited(false, 0.0);
  }
  // Three fruitless waits at the usual lag, then the lag doubles with each further one, up to 64
  // times max_lag: a handful of waits instead of 500.
  REQUIRE(waits.size() >= 6);
  CHECK(waits[0] == 4);
  CHECK(waits[1] == 8);
  CHECK(waits[2] == 12);
  CHECK(waits[3] == 20);
  CHECK(waits[4] == 36);
  CHECK(waits.size() < 20);
  for (std::size_t k = 1; k < waits.size(); ++k) CHECK(waits[k] - waits[k - 1] <= 4 * 64);
  CHECK(lb.lag() == 4 * 64);
  CHECK(warnings == 1);  // said once
  CHECK(lb.backing_off());

  // An exchange averages: the usual lag again, said once, and a later run of failures warns anew.
  CHECK_FALSE(lb.should_wait(2001, 1, 2.001));
  CHECK_FALSE(lb.backing_off());
  CHECK(lb.lag() == 4);
  CHECK(lb.take_recovered());
  CHECK_FALSE(lb.take_recovered());
  CHECK(lb.should_wait(2005, 1, 2.005));
  int again = 0;
  for (std::int64_t step = 2006; step <= 2100; ++step)
    if (lb.should_wait(step, 1, step * 1e-3)) again += lb.waited(false, 0.0);
  CHECK(lb.waited(false, 0.0) + again == 1);
}

TEST_CASE("lag bound: a wait that sees an exchange average keeps the usual lag", "[gossip]") {
  LagBound lb({4});
  std::uint64_t averaged = 0;
  int waits = 0;
  for (std::int64_t step = 1; step <= 400; ++step) {
    if (!lb.should_wait(step, averaged, step * 1e-3)) continue;
    ++waits;
    ++averaged;  // every wait ends with an exchange done
    CHECK_FALSE(lb.waited(true, 0.0));
  }
  CHECK_FALSE(lb.backing_off());
  CHECK(waits >= 400 / 5 - 1);  // every 5th step: 4 steps, then the step that saw the count move
}

TEST_CASE("lag bound: off with max_lag 0, and bad settings refused", "[gossip]") {
  LagBound off({0});
  for (std::int64_t step = 1; step < 100; ++step) CHECK_FALSE(off.should_wait(step, 0, step * 1e-3));
  CHECK_THROWS_AS(LagBound({-1}), std::invalid_argument);
  CHECK_THROWS_AS(LagBound({4, 0}), std::invalid_argument);
  CHECK_THROWS_AS(LagBound({4, 3, 64, -0.1}), std::invalid_argument);
  CHECK_THROWS_AS(LagBound({4, 3, 64, 0.25, 0.0}), std::invalid_argument);
}

// --max-lag as a type: auto is resolved in one place (MaxLag::resolve), off is 0 steps, a number
// is itself whatever the backend; the spellings are the flag's.
TEST_CASE("max-lag setting: auto, off or N, resolved in one place", "[gossip]") {
  const MaxLag automatic, off = MaxLag::off(), twelve = MaxLag::steps(12);
  CHECK(automatic.resolve(4, true) == 16);  // the CPU: 4 x --gossip-every
  CHECK(automatic.resolve(4, false) == 4);  // a GPU: 1 x
  CHECK(off.resolve(4, true) == 0);
  CHECK(off.resolve(4, false) == 0);
  CHECK(twelve.resolve(4, true) == 12);
  CHECK(twelve.resolve(4, false) == 12);
  CHECK(to_string(automatic) == "auto");
  CHECK(to_string(off) == "off");
  CHECK(to_string(twelve) == "12");
  CHECK(automatic == MaxLag());
  CHECK_FALSE(off == automatic);
  CHECK_THROWS_AS(MaxLag::steps(0), std::invalid_argument);
}

// Issue 27, scenario 1: a peer whose steps take 0.25 ms beside exchanges of 10 ms waited for one
// every 16 steps (4 ms of training), so it ran at a fraction of its speed once a partner came.
TEST_CASE("lag bound: waits for slow exchanges cost at most the budget's share of training",
          "[gossip]") {
  const double step_s = 0.25e-3, exchange_s = 10e-3;
  for (const double share : {0.25, 0.5}) {
    INFO("share " << share);
    LagBound lb({16, 3, 64, share, 0.5});
    std::uint64_t averaged = 0;
    double train_s = 0, wait_s = 0;
    int waits = 0;
    for (std::int64_t step = 1; step <= 200000; ++step) {
      train_s += step_s;
      if (!lb.should_wait(step, averaged, train_s)) continue;
      ++waits;
      wait_s += exchange_s;  // every wait sees its exchange average, 10 ms later
      ++averaged;
      CHECK_FALSE(lb.waited(true, exchange_s));
    }
    // 50 s of training: the waits take share of it, plus the burst and one wait at most.
    CHECK(wait_s <= share * train_s + 0.5 + exchange_s);
    CHECK(wait_s >= 0.9 * share * train_s);  // and the bound still waits, as far as it may
    CHECK(lb.deferred() > 0);
    CHECK_FALSE(lb.backing_off());  // waits put off by the budget are not fruitless
  }
  // Without a budget (share 0), every 16 steps: 40 times the training time in waits.
  LagBound strict({16, 3, 64, 0.0});
  double train_s = 0, wait_s = 0;
  std::uint64_t averaged = 0;
  for (std::int64_t step = 1; step <= 20000; ++step) {
    train_s += step_s;
    if (!strict.should_wait(step, averaged, train_s)) continue;
    wait_s += exchange_s;
    ++averaged;
    strict.waited(true, exchange_s);
  }
  CHECK(wait_s > 2 * train_s);
  CHECK(strict.deferred() == 0);
}

TEST_CASE("lag bound: where exchanges keep up, the budget changes nothing", "[gossip]") {
  // 1 ms steps, exchanges of 2 ms waited for every 16 steps: 1/8 of training, under 0.25.
  LagBound with({16}), without({16, 3, 64, 0.0});
  std::uint64_t a = 0, b = 0;
  int waits_with = 0, waits_without = 0;
  for (std::int64_t step = 1; step <= 10000; ++step) {
    if (with.should_wait(step, a, step * 1e-3)) {
      ++waits_with;
      ++a;
      with.waited(true, 2e-3);
    }
    if (without.should_wait(step, b, step * 1e-3)) {
      ++waits_without;
      ++b;
      without.waited(true, 2e-3);
    }
  }
  CHECK(waits_with == waits_without);
  CHECK(with.deferred() == 0);
}

TEST_CASE("lag bound: the budget and the backoff together against failing partners", "[gossip]") {
  // Every wait runs its full 2 s in vain: the budget spaces the waits by 8 s of training each, and
  // after 3 of them the backoff spaces them further; one warning.
  LagBound lb({16});
  double train_s = 0, wait_s = 0;
  int warnings = 0;
  for (std::int64_t step = 1; step <= 400000; ++step) {  // 100 s of 0.25 ms steps
    train_s += 0.25e-3;
    if (!lb.should_wait(step, 0, train_s)) continue;
    wait_s += 2.0;
    warnings += lb.waited(false, 2.0);
  }
  CHECK(wait_s <= 0.25 * train_s + 0.5 + 2.0);
  CHECK(warnings == 1);
  CHECK(lb.backing_off());
}
