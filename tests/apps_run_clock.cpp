// The run's one time axis over its launches (apps/launch/run_clock.hpp): a resumed launch goes on
// where the last one stopped, and each process of a peer is placed by its own clock line.
#include <catch2/catch.hpp>

#include "apps/launch/run_clock.hpp"

using gossiptrain::apps::LifeOffsets;
using gossiptrain::apps::RunClock;
using nlohmann::json;

TEST_CASE("run clock: a fresh run starts at 0 and maps wall time by its start", "[apps]") {
  const RunClock c(1000.0);
  CHECK(c.base_s() == 0.0);
  CHECK(c.at_unix(1012.5) == Approx(12.5));
}

// Defects issue, item 8: after --resume, the resumed launch's clock started again at 0, so the
// first launch's lines and the second's overlapped and the summary's seconds was the last
// launch's alone.
TEST_CASE("run clock: a resumed launch goes on where the last stopped, the gap left out",
          "[apps]") {
  // The first launch ran from wall time 1000 to 1020 (its last line at 20 s); the run was down
  // for an hour; the second launch starts at 4620.
  const std::vector<json> events = {
      {{"t", 0.0}, {"event", "launch"}, {"unix_s", 1000.0}},
      {{"t", 0.1}, {"event", "start"}, {"peer", 0}},
      {{"t", 20.0}, {"event", "exit"}, {"peer", 0}}};
  SECTION("with the last launch's summary.json") {
    const RunClock c(events, 20.4, 4620.0);
    CHECK(c.base_s() == Approx(20.4));
    CHECK(c.at_unix(1002.0) == Approx(2.0));          // a process of the first launch
    CHECK(c.at_unix(4621.5) == Approx(20.4 + 1.5));   // one of this launch
  }
  SECTION("a launcher killed before its summary: its last line bounds it") {
    const RunClock c(events, std::nullopt, 4620.0);
    CHECK(c.base_s() == Approx(20.0));
  }
  SECTION("three launches: each wall time on the launch running then") {
    std::vector<json> more = events;
    more.push_back({{"t", 20.4}, {"event", "launch"}, {"unix_s", 4620.0}});
    more.push_back({{"t", 30.0}, {"event", "exit"}, {"peer", 0}});
    const RunClock c(more, 30.2, 9000.0);
    CHECK(c.base_s() == Approx(30.2));
    CHECK(c.at_unix(1001.0) == Approx(1.0));
    CHECK(c.at_unix(4625.0) == Approx(25.4));
    CHECK(c.at_unix(9003.0) == Approx(33.2));
  }
}

TEST_CASE("life offsets: each process of a peer by its clock line, else by when its lines came",
          "[apps]") {
  LifeOffsets l;
  l.add(0, 0.0, 3.0, std::nullopt);  // read at run time 3: an upper bound of its start
  l.add(0, 0.0, 3.0, 1.25);          // its clock line: exact
  l.add(0, 5.0, 7.0, std::nullopt);  // a later estimate (2.0) does not move an exact start
  REQUIRE(l.offsets().size() == 1);
  CHECK(l.offsets()[0] == Approx(1.25));
  // The restarted process (t starts again), without a clock line: the smallest now - t.
  l.add(1, 4.0, 30.0, std::nullopt);
  l.add(1, 6.0, 31.0, std::nullopt);
  REQUIRE(l.offsets().size() == 2);
  CHECK(l.offsets()[1] == Approx(25.0));
}
