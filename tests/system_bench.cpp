// gossip-bench as a user runs it: bad values are refused with a message and exit code 2, and a
// small run prints one JSON object with the figure, the reference and their ratio.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/system_process.hpp"

using namespace std::chrono_literals;

namespace {

int run_bench(const std::vector<std::string>& args, const std::string& log, std::string* out) {
  return gt_test::run_app("gossip-bench", args, log, out, 120s);
}

// The JSON object among the output lines (log lines go to stderr, which the log file also holds).
nlohmann::json json_line(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') return nlohmann::json::parse(line);
  FAIL("no JSON object in the output:\n" << out);
  return {};
}

}  // namespace

TEST_CASE("gossip-bench refuses bad values with exit code 2 and a message", "[system]") {
  gt_test::TempDir tmp("gt-bench-bad");
  std::string out;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"average", "--params", "-5"}, "--params"},
      {{"average", "--params", "1e3"}, "--params"},
      {{"average", "--reps"}, "needs a value"},
      {{"average", "--train-max-rate", "5"}, "under 20 (MB/s)"},
      {{"average", "--net-nice", "20"}, "--net-nice"},
      {{"train", "--batch", "99999999999"}, "--batch"},
      {{"train", "--batch", "3x"}, "--batch"},
      {{"train", "--precision", "fp64"}, "--precision"},  // refused by the flag table
      {{"average", "--wire", "int3"}, "--wire"},
      {{"transport", "--runs", "0"}, "--runs"},
      {{"transport", "--frame-kb", "100000"}, "--frame-kb"},
      {{"rate", "--peers", "1"}, "--peers"},
      {{"rate", "--step", "nap"}, "--step"},
      {{"rate", "--path", "gpu"}, "--path"},
      {{"rate", "--max-lag", "soon"}, "--max-lag"},
      {{"nosuchsubject"}, "nosuchsubject"},
  };
  for (const auto& [args, needle] : cases) {
    const int rc = run_bench(args, tmp / "bad.log", &out);
    INFO(args[0] << " " << (args.size() > 1 ? args[1] : "") << ": " << out);
    CHECK(rc == 2);
    CHECK(out.find(needle) != std::string::npos);
  }
}

TEST_CASE("gossip-bench average prints its figures as one JSON object", "[system]") {
  gt_test::TempDir tmp("gt-bench-average");
  std::string out;
  const int rc = run_bench({"average", "--params", "20000", "--reps", "2", "--train-steps", "2",
                            "--train-rounds", "1", "--json"},
                           tmp / "average.log", &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto j = json_line(out);
  CHECK(j["subject"] == "average");
  CHECK(j["exchange_ms"].get<double>() > 0);
  CHECK(j["channel_ms"].get<double>() > 0);
  CHECK(j["efficiency"].get<double>() ==
        Approx(j["channel_ms"].get<double>() / j["exchange_ms"].get<double>()));
  CHECK(j["train"]["slowdown"].get<double>() > 0);
}

TEST_CASE("gossip-bench rate prints exchanges against steps and where an exchange's time goes",
          "[system]") {
  gt_test::TempDir tmp("gt-bench-rate");
  std::string out;
  const int rc = run_bench({"rate", "--seconds", "1.5", "--warmup", "0.5", "--json"},
                           tmp / "rate.log", &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto j = json_line(out);
  CHECK(j["subject"] == "rate");
  CHECK(j["params"] == 107786);  // NIID-Bench's CNN, as docs/fedavg.md runs it
  CHECK(j["payload_bytes_each_way"] == 4 * 107786);
  const double steps = j["steps_per_s"].get<double>(), ex = j["exchanges_per_s"].get<double>();
  CHECK(steps > 0);
  REQUIRE(ex > 0);
  CHECK(j["steps_per_exchange"].get<double>() == Approx(steps / ex));
  CHECK(j["aead_seal_us"].get<double>() > 0);
  for (const char* role : {"initiator_us", "responder_us"}) {
    INFO(role);
    const auto& r = j[role];
    REQUIRE(r["exchanges"].get<int>() > 0);
    // Each exchange's phases come in order, so their medians do too.
    CHECK(r["accept_to_received"].get<double>() >= 0);
    CHECK(r["accept_to_commit"].get<double>() >= r["accept_to_received"].get<double>());
    CHECK(r["accept_to_commit"].get<double>() >= r["accept_to_voted"].get<double>());
    CHECK(r["total"].get<double>() >= r["accept_to_commit"].get<double>());
  }
  CHECK(j["initiator_us"]["start_to_accept"].get<double>() >=
        j["initiator_us"]["request_to_accept"].get<double>());
}
