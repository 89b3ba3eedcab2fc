// The OpenBLAS core our programs run, as a user sees it: named in gossip-bench's JSON and the
// peer's data line; a generic fallback replaced by the native core once a probe child passes it
// (the verdict cached); a probe that sees a wrong product keeps the fallback with a warning; the
// user's OPENBLAS_CORETYPE and --blas-core win; gossip-launch decides once for all its peers.
//
// These machines' OpenBLAS may recognise their CPU. GT_BLAS_TEST_DETECTED_CORE=Prescott then
// stands in for the detection: the programs decide as though OpenBLAS had fallen back, and run
// Prescott's kernels for real when they keep the fallback.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cpu/blas_core_choice.hpp"
#include "kernels/cpu/blas_info.hpp"
#include "kernels/cpu/blas_probe.hpp"
#include "tests/system_process.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
namespace kn = gossiptrain::kernels;

namespace {

class EnvVar {
 public:
  EnvVar(const std::string& name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name.c_str())) old_ = old, had_ = true;
    set(value);
  }
  void set(const char* value) {
    if (value) ::setenv(name_.c_str(), value, 1);
    else ::unsetenv(name_.c_str());
  }
  ~EnvVar() { set(had_ ? old_.c_str() : nullptr); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A clean slate for the programs started here: no choice of core from outside (the test binary's
// own environment may carry one), and a verdict cache of the test's own.
struct BlasEnv {
  explicit BlasEnv(const std::string& cache)
      : cache_home("XDG_CACHE_HOME", cache.c_str()),
        coretype("OPENBLAS_CORETYPE", nullptr),
        chosen(kn::kBlasChosenEnv, nullptr),
        pretend(kn::kBlasPretendEnv, nullptr),
        corrupt(kn::kBlasProbeCorruptEnv, nullptr) {}
  EnvVar cache_home, coretype, chosen, pretend, corrupt;
};

json bench_json(const std::vector<std::string>& extra, const std::string& log, std::string* out) {
  std::vector<std::string> args = {"train",   "--backend", "cpu",     "--model", "mlp:784-64-10",
                                   "--batch", "64",        "--steps", "5",       "--rounds",
                                   "1",       "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const int rc = gt_test::run_app("gossip-bench", args, log, out, 120s);
  INFO(*out);
  REQUIRE(rc == 0);
  std::istringstream in(*out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') return json::parse(line);
  FAIL("no JSON object in the output");
  return {};
}

// The native core this CPU's flags allow; "" when it has none (these tests then say so and stop).
std::string native_core() { return kn::native_core_for(kn::read_cpu_flags()); }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int cache_files(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/gossiptrain", ec))
    n += e.path().filename().string().rfind("blas-core-", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("gossip-bench train names the BLAS kernels it ran", "[system]") {
  // This test binary settled its own core as the programs do (tests/catch_main.cpp), unless the
  // user chose one for it.
  const bool ours = std::getenv(kn::kBlasChosenEnv) != nullptr;
  const bool users = !ours && std::getenv("OPENBLAS_CORETYPE") != nullptr;
  const char* stand_in = std::getenv(kn::kBlasPretendEnv);  // the suite run as on a fallback
  const std::string outer_stand_in = stand_in ? stand_in : "";
  gt_test::TempDir tmp("gt-blas-bench");
  BlasEnv env(tmp.str());
  // gossip-bench decides from what this binary decided from, in a cache of its own.
  if (!outer_stand_in.empty()) env.pretend.set(outer_stand_in.c_str());
  std::string out;
  const json j = bench_json({}, tmp / "bench.log", &out);
  const kn::BlasInfo here = kn::blas_info();
  CHECK(j["blas_library"] == "OpenBLAS");
  CHECK(j["blas_version"] == here.version);
  CHECK(j["blas_threads"].get<int>() >= 1);
  if (!users) CHECK(j["blas_core"] == here.core);
  // Nothing set: OpenBLAS's own choice, unless it fell back on this machine.
  if (!users && !ours) CHECK(j["blas_core_source"] == "detected");
  if (ours) CHECK((j["blas_core_source"] == "probe" || j["blas_core_source"] == "refused"));
}

TEST_CASE(
    "a fallback core is replaced by the native core once its probe passes, and the verdict "
    "is cached",
    "[system]") {
  const std::string native = native_core();
  if (native.empty()) {
    WARN("this CPU shows no AVX2+FMA: nothing better than a fallback to choose");
    return;
  }
  gt_test::TempDir tmp("gt-blas-probe");
  BlasEnv env(tmp.str());
  env.pretend.set("Prescott");
  std::string out;
  const json first = bench_json({}, tmp / "first.log", &out);
  CHECK(first["blas_core"] == native);
  CHECK(first["blas_core_source"] == "probe");
  CHECK(first["blas_core_tried"] == native);
  CHECK(has(out, "checking " + native + " in a child process"));
  // It runs again only where OpenBLAS really loaded another core; where it loaded the native one
  // already (only the detection is pretended), there is nothing to switch.
  const std::string loaded = kn::blas_info().core;
  INFO("OpenBLAS loaded " << loaded << " here");
  if (!kn::same_core(loaded, native))
    CHECK(has(out, "running again with OPENBLAS_CORETYPE=" + native));
  else
    CHECK_FALSE(has(out, "running again"));
  CHECK(cache_files(tmp.str()) == 1);

  const json second = bench_json({}, tmp / "second.log", &out);
  CHECK(second["blas_core"] == native);
  CHECK(second["blas_core_source"] == "cache");
  CHECK_FALSE(has(out, "in a child process"));
  // The same products on other kernels: the same loss, to fp32 rounding.
  const json fallback = bench_json({"--blas-core", "Prescott"}, tmp / "prescott.log", &out);
  CHECK(fallback["blas_core"] == "Prescott");
  CHECK(fallback["last_loss"].get<double>() ==
        Approx(first["last_loss"].get<double>()).epsilon(1e-4));
}

TEST_CASE("a probe that sees a wrong GEMM result keeps the peer on the fallback, with a warning",
          "[system]") {
  const std::string native = native_core();
  if (native.empty()) {
    WARN("this CPU shows no AVX2+FMA: no native core to refuse");
    return;
  }
  gt_test::TempDir tmp("gt-blas-refuse");
  BlasEnv env(tmp.str());
  env.pretend.set("Prescott");
  env.corrupt.set("1");
  std::string out;
  const int rc = gt_test::run_app(
      "gossip-peer",
      {"--data", "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10", "--epochs", "1",
       "--identity", tmp / "id.key", "--metrics", tmp / "metrics.jsonl"},
      tmp / "peer.log", &out, 120s);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(has(out, "OpenBLAS stays on its generic Prescott kernels: " + native +
                     " failed its self-test (failed: wrong result"));
  CHECK(has(out, "core Prescott"));
  json data;
  for (const auto& m : gt_test::read_metrics(tmp / "metrics.jsonl"))
    if (m["event"] == "data") data = m;
  REQUIRE(data.is_object());
  CHECK(data["blas_core"] == "Prescott");  // Prescott's kernels ran, not OpenBLAS's own choice
  CHECK(data["blas_core_source"] == "refused");
  CHECK(data["blas_core_tried"] == native);
  CHECK(data["blas_library"] == "OpenBLAS");
  CHECK(data["blas_threads"].get<int>() >= 1);
  CHECK(cache_files(tmp.str()) == 0);  // a corrupted probe is not this machine's verdict
}

TEST_CASE("the user's OPENBLAS_CORETYPE and --blas-core win over the probe", "[system]") {
  gt_test::TempDir tmp("gt-blas-user");
  BlasEnv env(tmp.str());
  env.pretend.set("Prescott");
  std::string out;
  env.coretype.set("Haswell");
  json j = bench_json({}, tmp / "user.log", &out);
  CHECK(j["blas_core"] == "Haswell");
  CHECK(j["blas_core_source"] == "user");
  CHECK_FALSE(has(out, "child process"));
  // The flag wins over the variable too.
  j = bench_json({"--blas-core", "Sandybridge"}, tmp / "flag.log", &out);
  CHECK(j["blas_core"] == "Sandybridge");
  CHECK(j["blas_core_source"] == "flag");
  env.coretype.set(nullptr);
  // keep: what OpenBLAS detected (here the stand-in, Prescott), with no probe.
  j = bench_json({"--blas-core", "keep"}, tmp / "keep.log", &out);
  CHECK(j["blas_core"] == "Prescott");
  CHECK(j["blas_core_source"] == "detected");
  CHECK_FALSE(has(out, "child process"));
  CHECK(cache_files(tmp.str()) == 0);
  // A mark of ours with another OPENBLAS_CORETYPE is the user's change, not our choice.
  env.chosen.set("Zen:probe");
  env.coretype.set("Haswell");
  j = bench_json({}, tmp / "changed.log", &out);
  CHECK(j["blas_core"] == "Haswell");
  CHECK(j["blas_core_source"] == "user");
}

TEST_CASE("gossip-launch decides the core once and every peer runs it without probing",
          "[system]") {
  const std::string native = native_core();
  if (native.empty()) {
    WARN("this CPU shows no AVX2+FMA: no native core to pass on");
    return;
  }
  gt_test::TempDir tmp("gt-blas-launch");
  BlasEnv env(tmp.str());
  env.pretend.set("Prescott");
  std::string out;
  const int rc =
      gt_test::run_app("gossip-launch",
                       {"--peers", "3", "--mode", "local", "--out", tmp / "run", "--data",
                        "synthetic", "--epochs", "1", "--model", "mlp:784-32-10", "--no-plots"},
                       tmp / "launch.log", &out, 180s);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(has(out, "peers' OpenBLAS core " + native + " (probe"));
  for (int i = 0; i < 3; ++i) {
    const std::string dir = tmp / ("run/peer" + std::to_string(i));
    const std::string log = gt_test::read_file(dir + "/log.txt");
    INFO("peer " << i << ":\n" << log);
    CHECK_FALSE(has(log, "child process"));
    CHECK_FALSE(has(log, "running again"));
    json data;
    for (const auto& m : gt_test::read_metrics(dir + "/metrics.jsonl"))
      if (m["event"] == "data") data = m;
    REQUIRE(data.is_object());
    CHECK(data["blas_core"] == native);
    CHECK(data["blas_core_source"] == "probe");
  }
}
