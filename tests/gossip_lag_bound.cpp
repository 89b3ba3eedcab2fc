// --max-lag's policy (LagBound): a wait every max_lag steps without an averaging exchange, and the
// backoff that stops training waiting for exchanges that cannot succeed.
#include <catch2/catch.hpp>

#include <vector>

#include "gossip/exchange/lag_bound.hpp"

using namespace gossiptrain::gossip;

TEST_CASE("lag bound: waits every max_lag steps while nothing averages, then backs off",
          "[gossip]") {
  LagBound lb({4});
  std::vector<std::int64_t> waits;
  int warnings = 0;
  for (std::int64_t step = 1; step <= 2000; ++step) {
    if (!lb.should_wait(step, 0)) continue;
    waits.push_back(step);
    warnings += lb.waited(false);
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
  CHECK_FALSE(lb.should_wait(2001, 1));
  CHECK_FALSE(lb.backing_off());
  CHECK(lb.lag() == 4);
  CHECK(lb.take_recovered());
  CHECK_FALSE(lb.take_recovered());
  CHECK(lb.should_wait(2005, 1));
  int again = 0;
  for (std::int64_t step = 2006; step <= 2100; ++step)
    if (lb.should_wait(step, 1)) again += lb.waited(false);
  CHECK(lb.waited(false) + again == 1);
}

TEST_CASE("lag bound: a wait that sees an exchange average keeps the usual lag", "[gossip]") {
  LagBound lb({4});
  std::uint64_t averaged = 0;
  int waits = 0;
  for (std::int64_t step = 1; step <= 400; ++step) {
    if (!lb.should_wait(step, averaged)) continue;
    ++waits;
    ++averaged;  // every wait ends with an exchange done
    CHECK_FALSE(lb.waited(true));
  }
  CHECK_FALSE(lb.backing_off());
  CHECK(waits >= 400 / 5 - 1);  // every 5th step: 4 steps, then the step that saw the count move
}

TEST_CASE("lag bound: off with max_lag 0, and bad settings refused", "[gossip]") {
  LagBound off({0});
  for (std::int64_t step = 1; step < 100; ++step) CHECK_FALSE(off.should_wait(step, 0));
  CHECK_THROWS_AS(LagBound({-1}), std::invalid_argument);
  CHECK_THROWS_AS(LagBound({4, 0}), std::invalid_argument);
}
