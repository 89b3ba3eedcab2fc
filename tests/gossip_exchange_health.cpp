// ExchangeHealth: a run of failed exchanges is reported once, at both thresholds, with its most
// common reason and address; a success ends it.
#include <catch2/catch.hpp>

#include "gossip/node/exchange_health.hpp"

using namespace gossiptrain;
using gossip::ExchangeHealth;
using Change = ExchangeHealth::Change;
using net::Millis;

TEST_CASE("exchange health: reports a run of failures once, at both thresholds", "[gossip]") {
  ExchangeHealth h({/*min_failures=*/20, /*min_duration=*/Millis(30000)});
  int reported = 0;
  // 25 failures within 10 s: enough attempts, too short.
  for (int i = 0; i < 25; ++i) {
    CHECK(h.on_result(false, "connect", "0.0.0.0:7000", Millis(i * 400)) == Change::None);
  }
  CHECK_FALSE(h.failing());
  // Keep failing until 30 s: reported exactly once, at the first failure past 30 s.
  for (int t = 10000; t <= 60000; t += 1000) {
    const std::string addr = t % 3000 == 0 ? "10.0.0.2:7000" : "0.0.0.0:7000";
    const std::string reason = t % 5000 == 0 ? "busy" : "connect";
    const Change c = h.on_result(false, reason, addr, Millis(t));
    if (c == Change::Failing) {
      ++reported;
      CHECK(t == 30000);
    } else {
      CHECK(c == Change::None);
    }
  }
  CHECK(reported == 1);
  CHECK(h.failing());
  const auto a = h.alert();
  CHECK(a.failures == 25 + 51);
  CHECK(a.duration == Millis(60000));
  CHECK(a.reason == "connect");
  CHECK(a.addr == "0.0.0.0:7000");
  CHECK(a.by_reason.at("busy") == 11);
  // A success ends the run and is reported as the recovery, once.
  CHECK(h.on_result(true, "", "10.0.0.2:7000", Millis(61000)) == Change::Recovered);
  CHECK_FALSE(h.failing());
  CHECK(h.on_result(true, "", "", Millis(62000)) == Change::None);
}

TEST_CASE("exchange health: occasional successes keep a peer healthy", "[gossip]") {
  ExchangeHealth h;
  for (int i = 0; i < 1000; ++i) {
    const bool ok = i % 19 == 18;  // 18 failures in a row, then a success, over 1000 s
    CHECK(h.on_result(ok, ok ? "" : "busy", "", Millis(i * 1000)) == Change::None);
  }
  CHECK_FALSE(h.failing());
}
