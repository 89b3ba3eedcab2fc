// gossip-launch's figures from metrics lines: a figure no peer measured is null in summary.json and
// `-` in the live table and the --compare table, never a 0; a restarted peer's figures are its
// latest process's.
#include <catch2/catch.hpp>

#include <fstream>

#include "apps/launch/summary.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::apps;
using nlohmann::json;

namespace {

constexpr double kTarget = 0.9;

PeerStats fold(const std::vector<json>& lines) {
  PeerStats s;
  for (const auto& j : lines) REQUIRE(s.add_line(j.dump(), kTarget));
  return s;
}

json summarize(const std::vector<PeerStats>& stats, const std::vector<PeerOutcome>& outcomes) {
  static LaunchOptions o;
  RunFacts facts;
  facts.options = &o;
  facts.epochs = 2;
  facts.batch = 32;
  return make_summary(facts, stats, outcomes);
}

PeerOutcome outcome(const std::string& state) {
  PeerOutcome out;
  out.state = state;
  return out;
}

json eval_line(double t, int epoch, double acc) {
  return {{"t", t},          {"peer", "p"},        {"event", "eval"},
          {"epoch", epoch},  {"step", 10 * epoch}, {"train_loss", 1.5},
          {"test_acc", acc}, {"test_loss", 1.2}};
}

json done_line(double t, json final_acc, json best_acc) {
  return {{"t", t},
          {"peer", "p"},
          {"event", "done"},
          {"steps", 20},
          {"epochs", 2},
          {"final_test_acc", final_acc},
          {"best_test_acc", best_acc},
          {"seconds", t},
          {"stopped", false}};
}

}  // namespace

TEST_CASE("a peer that reported nothing has null figures in summary.json, not 0", "[apps]") {
  const PeerStats silent;  // e.g. exited before its metrics file had a line
  const PeerStats trained =
      fold({eval_line(1.0, 1, 0.5), eval_line(2.0, 2, 0.6), done_line(2.5, 0.6, 0.6)});
  const json s = summarize({silent, trained}, {outcome("exited with code 1"), outcome("done")});
  const json& p = s["peers"][0];
  for (const char* k :
       {"final_test_acc", "best_test_acc", "epochs", "steps", "samples", "samples_from", "seconds",
        "exchanges_ok", "exchanges_failed", "bytes_sent", "bytes_sent_and_received"}) {
    INFO("peer field " << k);
    CHECK(p[k].is_null());
  }
  CHECK(p["metrics_lines"] == 0);
  // The swarm's figures are over the peers that measured them: the silent one does not pull
  // the mean down.
  CHECK(s["final_test_acc_mean"].get<double>() == Approx(0.6));
  CHECK(s["final_test_acc_min"].get<double>() == Approx(0.6));
  CHECK(s["samples"] == trained.done_steps.value() * 32);
  CHECK(s["exchanges_ok"] == 0);
}

TEST_CASE("summary totals are null when no peer measured them", "[apps]") {
  const json s = summarize({PeerStats{}, PeerStats{}},
                           {outcome("killed by SIGKILL"), outcome("killed by SIGKILL")});
  for (const char* k : {"final_test_acc_mean", "final_test_acc_min", "final_test_acc_max",
                        "final_test_acc_spread", "best_test_acc", "time_to_target_s", "samples",
                        "exchanges_ok", "exchanges_failed", "bytes_sent"}) {
    INFO("summary field " << k);
    CHECK(s[k].is_null());
  }
}

TEST_CASE("a done line with null accuracies leaves them unknown", "[apps]") {
  // Stopped before its first evaluation: the peer says it does not know.
  PeerStats s = fold({done_line(0.5, nullptr, nullptr)});
  CHECK(s.done);
  CHECK_FALSE(s.final_test_acc);
  CHECK_FALSE(s.best_test_acc);
  const json j = summarize({s}, {outcome("stopped")});
  CHECK(j["peers"][0]["final_test_acc"].is_null());
  CHECK(j["peers"][0]["best_test_acc"].is_null());
  CHECK(j["final_test_acc_mean"].is_null());
}

TEST_CASE("a restarted peer's final figures are those of its latest process", "[apps]") {
  // One metrics file, two processes: t starts again near 0 when the peer is restarted.
  PeerStats s = fold({eval_line(1.0, 1, 0.5), eval_line(2.0, 2, 0.6), done_line(2.5, 0.6, 0.6)});
  REQUIRE(s.final_test_acc == 0.6);
  SECTION("the restarted process reports the model it loaded") {
    s.add_event(eval_line(0.1, 2, 0.6), kTarget);
    s.add_event(done_line(0.2, 0.6, 0.6), kTarget);
    CHECK(summarize({s}, {outcome("done")})["peers"][0]["final_test_acc"] == 0.6);
  }
  SECTION("a restarted process killed before its done line: its last eval, not the old done") {
    s.add_event(eval_line(0.1, 2, 0.55), kTarget);
    CHECK_FALSE(s.done);
    CHECK_FALSE(s.final_test_acc);
    const json j = summarize({s}, {outcome("killed by SIGKILL")});
    CHECK(j["peers"][0]["final_test_acc"].get<double>() == Approx(0.55));
    CHECK(j["peers"][0]["best_test_acc"].get<double>() == Approx(0.6));
  }
}

// Issue 26, item 2: a crash-restart run of 133 s reported a time to 85% of 168.8 s, the first
// life's 47.4 s added to the second life's clock offset of 121.3 s.
TEST_CASE("a time to target from a restarted peer's earlier life is on that life's clock",
          "[apps]") {
  const double first_offset = 1.5, second_offset = 121.3, target_t = 47.4;
  PeerStats s =
      fold({eval_line(20.0, 1, 0.5), eval_line(target_t, 2, 0.95), eval_line(60.0, 3, 0.96)});
  // The restarted process: its clock starts again at 0.
  s.add_event(eval_line(5.0, 3, 0.96), kTarget);
  s.add_event(done_line(11.0, 0.96, 0.96), kTarget);
  REQUIRE(s.time_to_target == target_t);
  PeerOutcome out = outcome("done");
  out.start_offset_s = second_offset - 0.5;
  out.life_offsets_s = {first_offset, second_offset};
  const json j = summarize({s}, {out});
  INFO(j.dump(2));
  CHECK(j["time_to_target_s"].get<double>() == Approx(target_t + first_offset));
  CHECK(j["peers"][0]["time_to_target_launch_s"].get<double>() == Approx(target_t + first_offset));
  CHECK(j["time_to_target_s"].get<double>() < second_offset + 11.0);  // within the run
  // Both processes' starts, and its seconds from the first start to the latest's end.
  CHECK(j["peers"][0]["life_offsets_s"] == json::array({first_offset, second_offset}));
  CHECK(j["peers"][0]["clock_offset_s"].get<double>() == Approx(second_offset));
  CHECK(j["peers"][0]["seconds"].get<double>() == Approx(second_offset - first_offset + 11.0));

  // Reached in the latest life: that life's offset, as before.
  PeerStats late = fold({eval_line(20.0, 1, 0.5)});
  late.add_event(eval_line(5.0, 2, 0.95), kTarget);
  CHECK(summarize({late}, {out})["time_to_target_s"].get<double>() == Approx(5.0 + second_offset));
}

// Issue 26, item 4: a peer waiting for the swarm before its first step looked merely silent.
TEST_CASE("a peer's hold line holds until it trains", "[apps]") {
  PeerStats s;
  REQUIRE(s.add_line(json{{"t", 0.1},
                          {"peer", "p"},
                          {"event", "hold"},
                          {"reason", "catch-up: joining"},
                          {"left_s", 59.6}}
                         .dump(),
                     kTarget));
  CHECK(s.hold == "catch-up: joining, at most 60 s");
  REQUIRE(s.add_line(json{{"t", 60.0}, {"peer", "p"}, {"event", "catch_up"}, {"ok", false}}.dump(),
                     kTarget));
  CHECK(s.hold.empty());
}

// Issue 26, item 6: a long epoch showed no progress in the live table until it ended.
TEST_CASE("the live table shows progress within an epoch from the step lines", "[apps]") {
  PeerStats s = fold({eval_line(1.0, 1, 0.5)});
  CHECK(peer_table_row(0, s, 3, "running").find(" 1/3 ") != std::string::npos);
  REQUIRE(s.add_line(json{{"t", 2.0},
                          {"peer", "p"},
                          {"event", "step"},
                          {"step", 170},
                          {"steps_total", 300},
                          {"epoch", 1},
                          {"loss", 0.7}}
                         .dump(),
                     kTarget));
  const std::string row = peer_table_row(0, s, 3, "running");
  INFO(row);
  CHECK(row.find("1.7/3") != std::string::npos);
}

TEST_CASE("the live table shows - for what a peer has not reported yet", "[apps]") {
  CHECK(peer_table_header().find("acc") != std::string::npos);
  const std::string empty = peer_table_row(7, PeerStats{}, 3, "starting");
  CHECK(empty.find("-/3") != std::string::npos);  // no epoch count claimed
  CHECK(empty.find('%') == std::string::npos);
  CHECK(empty.find('0') == std::string::npos);  // no step, loss, exchange, MB or member count

  const PeerStats s = fold({eval_line(1.0, 1, 0.4567)});
  const std::string row = peer_table_row(1, s, 3, "running");
  CHECK(row.find("45.67%") != std::string::npos);
  CHECK(row.find("1/3") != std::string::npos);
  CHECK(pct(std::nullopt) == "-");
  CHECK(pct(0.0) == "0.00%");
}

TEST_CASE("compare table: --compare shows - for figures a summary holds as null or lacks",
          "[apps]") {
  gt_test::TempDir dir("gt-compare-null");
  const json full = {
      {"mode", "gossip"},           {"partition", "iid"},         {"num_peers", 3},
      {"final_test_acc_mean", 0.5}, {"final_test_acc_min", 0.25}, {"best_test_acc", 0.75},
      {"time_to_target_s", 12.5},   {"exchanges_ok", 40},         {"exchanges_failed", 2},
      {"bytes_sent", 3e6},          {"consensus_distance", 0.125}};
  json nulls = full;
  for (const char* k :
       {"final_test_acc_mean", "final_test_acc_min", "best_test_acc", "time_to_target_s",
        "exchanges_ok", "exchanges_failed", "bytes_sent", "consensus_distance"})
    nulls[k] = nullptr;
  std::filesystem::create_directories(dir / "full");
  std::filesystem::create_directories(dir / "nulls");
  std::ofstream(dir / "full/summary.json") << full.dump();
  std::ofstream(dir / "nulls/summary.json") << nulls.dump();
  for (bool markdown : {false, true}) {
    INFO("markdown " << markdown);
    const std::string table = compare_runs({dir / "full", dir / "nulls"}, markdown);
    const auto full_row = table.substr(table.find("full"));
    const auto null_row = table.substr(table.find("nulls"));
    CHECK(full_row.find("50.00%") != std::string::npos);
    CHECK(full_row.find("40/2") != std::string::npos);
    CHECK(null_row.find('%') == std::string::npos);
    CHECK(null_row.find("-/-") != std::string::npos);
    CHECK(null_row.find('0') == std::string::npos);  // no figure at all, so no 0 either
  }
}

TEST_CASE("the summary counts exchanges clipped to almost nothing apart from those that averaged",
          "[apps]") {
  auto exchange = [](double t, bool ok, double clip, bool averaging) {
    return json{{"t", t},
                {"peer", "p"},
                {"event", "exchange"},
                {"ok", ok},
                {"reason", ok ? "" : "timeout:answer"},
                {"w", 0.5},
                {"clip", clip},
                {"w_eff", ok ? 0.5 * clip : 0.0},
                {"averaging", averaging}};
  };
  const PeerStats s = fold({exchange(1, true, 1.0, true),
                            exchange(2, true, 0.5, true),
                            exchange(3, true, 1e-12, false),
                            exchange(4, false, 1.0, false),
                            {{"t", 5},
                             {"peer", "p"},
                             {"event", "exchange_alert"},
                             {"state", "failing"},
                             {"reason", "clipped"}}});
  CHECK(s.exchanges_ok == 3);
  CHECK(s.exchanges_averaging == 2);
  CHECK(s.exchanges_clipped == 1);
  CHECK(s.exchanges_failed == 1);
  CHECK(s.mix_weight_sum == Approx(0.75));
  CHECK(s.not_averaging);  // the peer said so: it is flagged
  PeerOutcome out = outcome("done");
  out.started = true;
  const json j = summarize({s}, {out});
  CHECK(j["peers"][0]["exchanges_averaging"] == 2);
  CHECK(j["peers"][0]["exchanges_clipped"] == 1);
  CHECK(j["peers"][0]["mix_weight_sum"].get<double>() == Approx(0.75));
  CHECK(j["exchanges_averaging"] == 2);
  CHECK(j["peers_not_averaging"] == json::array({0}));
  // The live table shows averaging/ok/failed.
  CHECK(peer_table_row(0, s, 2, "running").find("2/3/1") != std::string::npos);
  // A line of an older peer, without `averaging`: every ok exchange averaged.
  const PeerStats old = fold({{{"t", 1}, {"peer", "p"}, {"event", "exchange"}, {"ok", true}}});
  CHECK(old.exchanges_averaging == 1);
}

TEST_CASE("a FedAvg run reaches the target when its server's global model does", "[apps]") {
  const PeerStats server =
      fold({eval_line(1.0, 1, 0.5), eval_line(2.0, 2, 0.95), done_line(2.5, 0.95, 0.95)});
  const PeerStats client =
      fold({{{"t", 1.5}, {"peer", "c"}, {"event", "update"}, {"round", 0}, {"bytes", 1000}},
            done_line(2.6, nullptr, nullptr)});
  CHECK(client.fedavg_client);
  const json s = summarize({server, client}, {outcome("done"), outcome("done")});
  CHECK_FALSE(s["time_to_target_s"].is_null());
  CHECK(s["final_test_acc_mean"].get<double>() == Approx(0.95));
  // A gossip peer that never evaluated still keeps the run from "every peer reached it".
  const PeerStats silent;
  CHECK(summarize({server, silent}, {outcome("done"), outcome("done")})["time_to_target_s"]
            .is_null());
}
