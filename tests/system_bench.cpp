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
