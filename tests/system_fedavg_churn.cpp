// gossip-launch --mode fedavg under churn (issue 33): the server crashed and restarted by the
// launcher, its clients waiting for it with backoff, and the summary saying how long no round
// completed; a client whose server never comes back gives up at its deadline.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using Catch::Matchers::Contains;

namespace {

std::vector<json> events_of(const std::string& file, const std::string& event) {
  std::vector<json> out;
  for (auto& l : gt_test::read_metrics(file))
    if (l["event"] == event) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("gossip-launch --mode fedavg: a server crashed at 40% and restarted 3 s later resumes "
          "its round and model, the clients wait for it, and the summary says how long no round "
          "completed",
          "[system][churn]") {
  gt_test::TempDir d("gt-fedavg-churn");
  std::string log;
  const int rounds = 10;
  // Long enough rounds that 40% comes well before the end: with 8 local epochs a quiet machine
  // ran all 10 rounds in 1.4 s, and the server was done before the launcher's crash came.
  const int local_epochs = 40;
  const int code = gt_test::run_app(
      "gossip-launch",
      {"--peers", "3", "--mode", "fedavg", "--out", d / "run", "--no-plots", "--data",
       "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10", "--lr", "0.02", "--rounds",
       std::to_string(rounds), "--local-epochs", std::to_string(local_epochs), "--target-acc",
       "0.5", "--churn", "crash:0@40%/3"},
      d / "launch.log", &log, 180s);
  INFO(log);
  REQUIRE(code == 0);
  const json s = json::parse(gt_test::read_file(d / "run/summary.json"));
  // The server is not a peer.
  CHECK(s["num_peers"] == 3);
  CHECK(s["num_servers"] == 1);
  CHECK(s["peers"][0]["role"] == "server");
  CHECK(s["peers"][1]["role"] == "client");
  const json& f = s["fedavg"];
  CHECK(f["rounds_completed"] == rounds);
  REQUIRE(f["server_outages"].size() == 1);
  const json& o = f["server_outages"][0];
  CHECK(o["how"] == "crash");
  CHECK(o["recovered"] == true);
  // Restarted by the scenario's "for" 3 s after the crash (the launcher ticks every 0.2 s).
  CHECK(o["down_s"].get<double>() >= 2.9);
  CHECK(o["down_s"].get<double>() < 4.5);
  CHECK(o["no_progress_s"].get<double>() >= o["down_s"].get<double>());
  const int before = o["last_round_before"].get<int>();
  CHECK(before >= 4);  // 40% of the rounds
  CHECK(before < rounds);
  // Resumed from the checkpoint of the last round it completed: no round lost, none redone.
  CHECK(o["resumed_at_round"] == before);
  CHECK(o["first_round_after"] == before + 1);
  CHECK(o["first_round_after_at_s"].get<double>() > o["back_at_s"].get<double>());
  CHECK_THAT(log, Contains("FedAvg server crash at"));
  CHECK_THAT(log, Contains("no round completed for"));
  // Each round applied exactly once over the server's two lives, and the resumed life said so.
  std::vector<int> applied;
  for (const auto& r : events_of(d / "run/peer0/metrics.jsonl", "round"))
    applied.push_back(r["round"].get<int>());
  std::vector<int> want;
  for (int r = 1; r <= rounds; ++r) want.push_back(r);
  CHECK(applied == want);
  const auto resumes = events_of(d / "run/peer0/metrics.jsonl", "resume");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["round"] == before);
  // Every client lost the server, waited for it and trained its resumed rounds.
  for (int i = 1; i <= 3; ++i) {
    const std::string m = d / ("run/peer" + std::to_string(i) + "/metrics.jsonl");
    CHECK(events_of(m, "server_lost").size() == 1);
    const auto back = events_of(m, "server_back");
    REQUIRE(back.size() == 1);
    CHECK(back[0]["away_s"].get<double>() >= 2.9);
    std::set<int> trained;
    for (const auto& u : events_of(m, "update")) trained.insert(u["round"].get<int>());
    CHECK(trained.count(before));      // the resumed round (0-based: round `before`)
    CHECK(trained.count(rounds - 1));  // and the last
    const std::string clog = gt_test::read_file(d / ("run/peer" + std::to_string(i) + "/log.txt"));
    CHECK_THAT(clog, Contains("lost the server"));
    CHECK_THAT(clog, Contains("is back after"));
  }
  // The figures that compare runs: rounds to the target, and the peers cell of --compare.
  CHECK(s["rounds_to_target"].is_number_integer());
  CHECK(s["epochs_to_target"] == s["rounds_to_target"].get<int>() * local_epochs);
  CHECK(s["exchanges_to_target"].is_null());
  std::string cmp;
  REQUIRE(gt_test::run_app("gossip-launch", {"--compare", d / "run"}, d / "cmp.log", &cmp, 30s) ==
          0);
  CHECK_THAT(cmp, Contains("3 + server"));
  CHECK_THAT(cmp, Contains(std::to_string(s["rounds_to_target"].get<int>()) + " rounds"));
}

TEST_CASE("fedavg: a client whose server never comes back backs off, says so, and gives up at "
          "--fedavg-wait",
          "[system]") {
  gt_test::TempDir d("gt-fedavg-wait");
  const std::string addr = "127.0.0.1:" + std::to_string(gt_test::free_port());  // nobody there
  std::string log;
  const auto t0 = std::chrono::steady_clock::now();
  const int code = gt_test::run_app(
      "gossip-peer",
      {"--data", "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10", "--num-shards", "2",
       "--shard", "1", "--fedavg-server-addr", addr, "--fedavg-wait", "3", "--identity",
       d / "c.key", "--metrics", d / "c.jsonl"},
      d / "c.log", &log, 60s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(log);
  CHECK(code == 1);
  CHECK(took < 30);
  CHECK_THAT(log, Contains("cannot reach the server " + addr));
  CHECK_THAT(log, Contains("giving up (--fedavg-wait)"));
  // Backoff: fewer dials than a fixed 0.25 s pause would make in 3 s (0.25, 0.5, 1, 2: 5 dials).
  std::size_t dials = 0;
  for (std::size_t p = 0; (p = log.find("cannot reach the server", p)) != std::string::npos; ++p)
    ++dials;
  CHECK(dials >= 2);
  CHECK(dials <= 6);
}
