// gossip-launch's figures from metrics lines: a figure no peer measured is null in summary.json and
// `-` in the live table and the --compare table, never a 0; a restarted peer's figures are its
// latest process's.
#include <catch2/catch.hpp>

#include <fstream>

#include "apps/launch_summary.hpp"
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
  return {{"t", t}, {"peer", "p"}, {"event", "eval"}, {"epoch", epoch}, {"step", 10 * epoch},
          {"train_loss", 1.5}, {"test_acc", acc}, {"test_loss", 1.2}};
}

json done_line(double t, json final_acc, json best_acc) {
  return {{"t", t}, {"peer", "p"}, {"event", "done"}, {"steps", 20}, {"epochs", 2},
          {"final_test_acc", final_acc}, {"best_test_acc", best_acc}, {"seconds", t},
          {"stopped", false}};
}

}  // namespace

TEST_CASE("a peer that reported nothing has null figures in summary.json, not 0", "[apps]") {
  const PeerStats silent;  // e.g. exited before its metrics file had a line
  const PeerStats trained = fold({eval_line(1.0, 1, 0.5), eval_line(2.0, 2, 0.6),
                                  done_line(2.5, 0.6, 0.6)});
  const json s = summarize({silent, trained}, {outcome("exited with code 1"), outcome("done")});
  const json& p = s["peers"][0];
  for (const char* k : {"final_test_acc", "best_test_acc", "epochs", "steps", "samples",
                        "samples_from", "seconds", "exchanges_ok", "exchanges_failed",
                        "bytes_sent", "bytes_sent_and_received"}) {
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
  const json s = summarize({PeerStats{}, PeerStats{}}, {outcome("killed by SIGKILL"),
                                                        outcome("killed by SIGKILL")});
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

TEST_CASE("compare table: --compare shows - for figures a summary holds as null or lacks", "[apps]") {
  gt_test::TempDir dir("gt-compare-null");
  const json full = {{"mode", "gossip"}, {"partition", "iid"}, {"num_peers", 3},
                     {"final_test_acc_mean", 0.5}, {"final_test_acc_min", 0.25},
                     {"best_test_acc", 0.75}, {"time_to_target_s", 12.5},
                     {"exchanges_ok", 40}, {"exchanges_failed", 2}, {"bytes_sent", 3e6},
                     {"consensus_distance", 0.125}};
  json nulls = full;
  for (const char* k : {"final_test_acc_mean", "final_test_acc_min", "best_test_acc",
                        "time_to_target_s", "exchanges_ok", "exchanges_failed", "bytes_sent",
                        "consensus_distance"})
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
