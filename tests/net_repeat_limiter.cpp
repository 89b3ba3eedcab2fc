// RepeatLimiter: one warning per key per quiet period, with the count of what was held back.
#include <catch2/catch.hpp>

#include <string>

#include "net/repeat_limiter.hpp"

using gossiptrain::net::RepeatLimiter;
using namespace std::chrono_literals;

TEST_CASE("repeat limiter: a warning per address per quiet period, with the repeats counted",
          "[net]") {
  RepeatLimiter lim(30s, 4);
  const auto t0 = RepeatLimiter::Clock::time_point{} + 1000s;
  CHECK(lim.admit("10.0.0.2:7000", t0) == 0u);  // the first: a warning, nothing held back
  for (int i = 1; i <= 5; ++i) CHECK_FALSE(lim.admit("10.0.0.2:7000", t0 + i * 1s));
  CHECK(lim.admit("10.0.0.3:7000", t0 + 2s) == 0u);  // another address has its own
  CHECK_FALSE(lim.admit("10.0.0.2:7000", t0 + 29s));
  CHECK(lim.admit("10.0.0.2:7000", t0 + 30s) == 6u);  // quiet over: says how many it held
  CHECK_FALSE(lim.admit("10.0.0.2:7000", t0 + 31s));

  // Bounded: a fifth address in a full table pushes out those whose quiet time is over.
  CHECK(lim.admit("a", t0 + 40s) == 0u);
  CHECK(lim.admit("b", t0 + 40s) == 0u);
  CHECK(lim.admit("c", t0 + 41s) == 0u);  // full: 10.0.0.3 (quiet over) goes
  CHECK_FALSE(lim.admit("a", t0 + 42s));   // still remembered
  // Full again, and none quiet for long enough: all are forgotten, so each warns once more.
  CHECK(lim.admit("d", t0 + 43s) == 0u);
  CHECK(lim.admit("a", t0 + 44s) == 0u);
  CHECK_FALSE(lim.admit("d", t0 + 45s));
}
