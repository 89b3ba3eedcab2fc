// bytes_to_target_mb in summary.json and --compare (issue 34): per peer, the MB it had sent when its
// first evaluation at or above the target came; for the swarm, their sum, null unless every peer
// got there; a FedAvg client's, the MB it had sent by the swarm's time to the target.
#include <catch2/catch.hpp>

#include <fstream>

#include "apps/launch/summary.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::apps;
using nlohmann::json;

namespace {

constexpr double kTarget = 0.85;

PeerStats fold(const std::vector<json>& lines) {
  PeerStats s;
  for (const auto& j : lines) REQUIRE(s.add_line(j.dump(), kTarget));
  return s;
}

json summarize(const std::vector<PeerStats>& stats, const std::vector<PeerOutcome>& outcomes) {
  static LaunchOptions o;  // target_acc 0.85, as kTarget
  RunFacts facts;
  facts.options = &o;
  facts.epochs = 2;
  facts.batch = 32;
  return make_summary(facts, stats, outcomes);
}

PeerOutcome started(double clock_offset_s = 0.0) {
  PeerOutcome out;
  out.state = "done";
  out.life_offsets_s = {clock_offset_s};
  return out;
}

json exchange(double t, double bytes_sent) {
  return {{"t", t},          {"peer", "p"}, {"event", "exchange"},
          {"ok", true},      {"w", 0.5},    {"bytes_sent", bytes_sent},
          {"bytes", 2 * bytes_sent}};
}

json eval(double t, double acc) {
  return {{"t", t}, {"peer", "p"}, {"event", "eval"}, {"epoch", 1}, {"test_acc", acc}};
}

}  // namespace

TEST_CASE("bytes to target counts a peer's sent bytes up to its first eval at the target",
          "[apps]") {
  // Peer 0: 3 MB, then 84% (below), 2 MB more, 86% (reached: 5 MB), then 4 MB more, 90%.
  const PeerStats a = fold({exchange(1, 1e6), exchange(2, 2e6), eval(3, 0.84), exchange(4, 2e6),
                            eval(5, 0.86), exchange(6, 4e6), eval(7, 0.90)});
  // Peer 1: 1 MB, reaches it at once; 7 MB more after.
  const PeerStats b = fold({exchange(1, 1e6), eval(2, 0.85), exchange(3, 7e6)});
  REQUIRE(a.bytes_at_target);
  CHECK(*a.bytes_at_target == 5000000);
  const json s = summarize({a, b}, {started(), started()});
  CHECK(s["peers"][0]["bytes_to_target_mb"].get<double>() == Approx(5.0));
  CHECK(s["peers"][1]["bytes_to_target_mb"].get<double>() == Approx(1.0));
  CHECK(s["peers"][0]["bytes_sent_mb"].get<double>() == Approx(9.0));
  // The swarm's: the sum over the peers, and the total, everything sent.
  CHECK(s["bytes_to_target_mb"].get<double>() == Approx(6.0));
  CHECK(s["bytes_sent_mb"].get<double>() == Approx(17.0));
  CHECK(s["bytes_sent"] == 17000000);
}

TEST_CASE("the swarm's bytes to target are null while a peer has not reached the target",
          "[apps]") {
  const PeerStats a = fold({exchange(1, 1e6), eval(2, 0.9)});
  const PeerStats slow = fold({exchange(1, 3e6), eval(2, 0.8)});
  const json s = summarize({a, slow}, {started(), started()});
  CHECK(s["peers"][0]["bytes_to_target_mb"].get<double>() == Approx(1.0));
  CHECK(s["peers"][1]["bytes_to_target_mb"].is_null());
  CHECK(s["bytes_to_target_mb"].is_null());
  CHECK(s["bytes_sent_mb"].get<double>() == Approx(4.0));
  // A peer with no line at all: null, never 0.
  const json n = summarize({a, PeerStats{}}, {started(), started()});
  CHECK(n["peers"][1]["bytes_to_target_mb"].is_null());
  CHECK(n["peers"][1]["bytes_sent_mb"].is_null());
  CHECK(n["bytes_to_target_mb"].is_null());
}

TEST_CASE("a restarted peer's bytes to target count every life up to the eval", "[apps]") {
  // First life sends 2 MB, dies; the second sends 1 MB and reaches the target on its own clock.
  const PeerStats s = fold({exchange(5, 2e6), eval(6, 0.5), exchange(1, 1e6), eval(2, 0.88)});
  CHECK(s.life == 1);
  REQUIRE(s.bytes_at_target);
  CHECK(*s.bytes_at_target == 3000000);
}

TEST_CASE("a FedAvg client's bytes to target are those it sent before the server reached it",
          "[apps]") {
  // The server's clock starts at launch 0; it reaches 85% at t = 10 having sent 4 MB.
  const PeerStats server = fold({{{"t", 2}, {"peer", "s"}, {"event", "round"}, {"bytes_sent", 2e6}},
                                 {{"t", 8}, {"peer", "s"}, {"event", "round"}, {"bytes_sent", 2e6}},
                                 eval(10, 0.86),
                                 {{"t", 12}, {"peer", "s"}, {"event", "round"}, {"bytes_sent", 2e6}}});
  // The client's clock starts at launch 1: updates at launch 3, 9 and 13 (after the target).
  auto update = [](double t) {
    return json{{"t", t}, {"peer", "c"}, {"event", "update"}, {"round", 0}, {"bytes", 1e6}};
  };
  const PeerStats client = fold({update(2), update(8), update(12)});
  REQUIRE(client.fedavg_client);
  CHECK(client.bytes_marks.size() == 3);
  const json s = summarize({server, client}, {started(0.0), started(1.0)});
  REQUIRE(s["time_to_target_s"].get<double>() == Approx(10.0));
  CHECK(s["peers"][0]["bytes_to_target_mb"].get<double>() == Approx(4.0));
  CHECK(s["peers"][1]["bytes_to_target_mb"].get<double>() == Approx(2.0));
  CHECK(s["bytes_to_target_mb"].get<double>() == Approx(6.0));
  CHECK(s["bytes_sent_mb"].get<double>() == Approx(9.0));
  // The server never got there: nobody's bytes to target, the client's included.
  const PeerStats never = fold({{{"t", 2}, {"peer", "s"}, {"event", "round"}, {"bytes_sent", 2e6}},
                                eval(10, 0.5)});
  const json n = summarize({never, client}, {started(0.0), started(1.0)});
  CHECK(n["peers"][1]["bytes_to_target_mb"].is_null());
  CHECK(n["bytes_to_target_mb"].is_null());
}

TEST_CASE("compare table: --compare shows the swarm's MB to target next to the MB sent",
          "[apps]") {
  gt_test::TempDir dir("gt-compare-bytes");
  const json run = {{"mode", "gossip"},          {"partition", "iid"},
                    {"num_peers", 8},            {"final_test_acc_mean", 0.88},
                    {"bytes_to_target_mb", 304.25}, {"bytes_sent", 7696e6},
                    {"bytes_sent_mb", 7696.0}};
  json old = run;  // a summary written before bytes_to_target_mb existed
  old.erase("bytes_to_target_mb");
  std::filesystem::create_directories(dir / "new");
  std::filesystem::create_directories(dir / "old");
  std::ofstream(dir / "new/summary.json") << run.dump();
  std::ofstream(dir / "old/summary.json") << old.dump();
  for (bool markdown : {false, true}) {
    const std::string table = compare_runs({dir / "new", dir / "old"}, markdown);
    CHECK(table.find("MB to target") != std::string::npos);
    const auto new_row = table.substr(table.find("new"), table.find("old") - table.find("new"));
    CHECK(new_row.find("304.2") != std::string::npos);
    CHECK(new_row.find("7696.0") != std::string::npos);
    const auto old_row = table.substr(table.find("old"));
    CHECK(old_row.find("304") == std::string::npos);
    CHECK(old_row.find("7696.0") != std::string::npos);
  }
}
