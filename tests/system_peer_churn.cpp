// gossip-peer --churn as a real process: a crash is a SIGKILL of itself at its point, and the
// restarted peer resumes without crashing again; a pause stops the process for its "for"
// seconds; a stop leaves cleanly. Each is a `churn` metrics line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/system_process.hpp"

using gt_test::read_metrics;
using gt_test::run_app;
using nlohmann::json;

namespace {

std::vector<json> of_event(const std::vector<json>& lines, const std::string& event) {
  std::vector<json> out;
  for (const auto& j : lines)
    if (j.value("event", "") == event) out.push_back(j);
  return out;
}

std::vector<std::string> peer_args(const gt_test::TempDir& dir, const std::string& scenario) {
  return {"--data",
          "synthetic",
          "--epochs",
          "6",
          "--metrics",
          dir / "metrics.jsonl",
          "--checkpoint-dir",
          dir / "ckpt",
          "--checkpoint-every",
          "1",
          "--identity",
          dir / "id.key",
          "--churn",
          scenario};
}

}  // namespace

TEST_CASE(
    "gossip-peer --churn: a crash kills the peer at its point, and restarted it resumes "
    "without crashing again",
    "[system]") {
  gt_test::TempDir dir("gt-peer-churn-crash");
  std::ofstream(dir / "s.json") << R"({"events": [
      {"at_progress": 0.5, "event": "crash", "peers": [0]},
      {"at_progress": 0.6, "event": "restart", "peers": [0]}]})";
  std::string out;
  const auto args = peer_args(dir, dir / "s.json");
  REQUIRE(run_app("gossip-peer", args, dir / "log1.txt", &out, std::chrono::seconds(240)) ==
          128 + SIGKILL);
  auto lines = read_metrics(dir / "metrics.jsonl");
  auto churn = of_event(lines, "churn");
  REQUIRE(churn.size() == 1);
  CHECK(churn[0]["kind"] == "crash");
  CHECK(churn[0]["progress"].get<double>() >= 0.5);
  CHECK(of_event(lines, "done").empty());  // no clean-up: it died
  CHECK(std::filesystem::exists(dir / "churn-played.txt"));
  // The engine's restart: the same command. It resumes from its checkpoint and finishes.
  REQUIRE(run_app("gossip-peer", args, dir / "log2.txt", &out, std::chrono::seconds(240)) == 0);
  lines = read_metrics(dir / "metrics.jsonl");
  CHECK(of_event(lines, "churn").size() == 1);
  CHECK(of_event(lines, "clock").size() == 2);
  REQUIRE(of_event(lines, "done").size() == 1);
  CHECK(out.find("already played") != std::string::npos);
  CHECK(out.find("resum") != std::string::npos);
}

TEST_CASE(
    "gossip-peer --churn: a pause stops the whole peer for its seconds, a stop ends it "
    "cleanly",
    "[system]") {
  gt_test::TempDir dir("gt-peer-churn-pause");
  std::ofstream(dir / "s.json") << R"({"events": [
      {"at_progress": 0.2, "event": "pause", "peers": [0], "for": 2},
      {"at_progress": 0.6, "event": "stop", "peers": [0]}]})";
  std::string out;
  REQUIRE(run_app("gossip-peer", peer_args(dir, dir / "s.json"), dir / "log.txt", &out,
                  std::chrono::seconds(240)) == 130);
  const auto lines = read_metrics(dir / "metrics.jsonl");
  const auto churn = of_event(lines, "churn");
  REQUIRE(churn.size() == 3);
  CHECK(churn[0]["kind"] == "pause");
  CHECK(churn[1]["kind"] == "resume");
  CHECK(churn[1]["t"].get<double>() - churn[0]["t"].get<double>() >= 2.0);
  CHECK(churn[2]["kind"] == "stop");
  const auto done = of_event(lines, "done");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["stopped"] == true);
  // A scenario a peer cannot play alone is bad input.
  std::ofstream(dir / "bad.json") << R"({"events": [{"at": 1, "event": "heal"}]})";
  CHECK(run_app("gossip-peer", peer_args(dir, dir / "bad.json"), dir / "bad.txt", &out,
                std::chrono::seconds(60)) == 2);
  CHECK(out.find("needs gossip-launch") != std::string::npos);
}
