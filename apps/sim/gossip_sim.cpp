// gossip-sim: thousands of peers in one process on a virtual clock, running the real protocol code
// of gossip/ (README, "Simulating large swarms"; docs/sim.md, "gossip-sim").
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/common/plots.hpp"
#include "apps/sim/options.hpp"
#include "core/dataset.hpp"

using namespace gossiptrain;
using apps::UsageError;
namespace fs = std::filesystem;

namespace {

double max_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return -1;
}

constexpr double kPlotTimeoutS = 300;  // a million events take about a minute

std::string default_out(int peers) {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", std::gmtime(&t));
  return "runs/sim-" + std::to_string(peers) + "p-" + buf;
}

void prepare_out(const std::string& out) {
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw UsageError("--out: '" + out + "' exists and is not an empty folder");
  fs::create_directories(out, ec);
  if (ec) throw UsageError("--out: cannot create '" + out + "': " + ec.message());
}

// scripts/plot/plot_sim.py on the run folder (it reads summary.json, written first), then
// summary.json again with what came of it ("plots").
void plot(const apps::sim::SimOptions& o, const std::string& out, nlohmann::json& s) {
  nlohmann::json plots = {{"ok", false}};
  const auto script = apps::find_script(apps::self_dir(), "plot_sim.py");
  if (!o.plots) plots["message"] = "skipped (--no-plots)";
  else if (!script)
    plots["message"] =
        "scripts/plot/plot_sim.py not found (set GT_SCRIPTS_DIR to the folder that holds it)";
  else plots = apps::run_plot_script(*script, out, kPlotTimeoutS, 100);
  s["plots"] = plots;
  std::ofstream(out + "/summary.json") << s.dump(2) << '\n';
  if (o.plots)
    std::fprintf(stderr, "plots: %s%s\n", plots["ok"].get<bool>() ? "" : "NOT MADE: ",
                 plots["message"].get<std::string>().c_str());
}

int run(const apps::sim::SimOptions& o, const std::vector<std::string>& args) {
  const std::string out = o.out.empty() ? default_out(o.world.peers) : o.out;
  // The world first (it reads and splits the data, and emits nothing yet): a configuration it
  // cannot run is refused with exit code 2 before a run folder exists.
  std::ofstream events;
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<apps::sim::World> world;
  try {
    world.emplace(o.world, events);
  } catch (const core::DataError& e) {
    throw UsageError(std::string("--data: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  prepare_out(out);
  {
    std::ofstream cmd(out + "/command.txt");
    cmd << "gossip-sim";
    for (const auto& a : args) cmd << ' ' << a;
    cmd << '\n';
  }
  events.open(out + "/events.jsonl");
  if (!events) throw UsageError("--out: cannot write " + out + "/events.jsonl");
  nlohmann::json s = world->run();
  world.reset();
  events.close();  // every line on disk before the plots read them
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s["wall_seconds"] = wall;
  const double simulated = s["sim_seconds"].get<double>();
  s["sim_over_wall"] = wall > 0 ? simulated / wall : 0.0;
  s["max_rss_mb"] = max_rss_mb();
  s["run_dir"] = out;
  std::ofstream(out + "/summary.json") << s.dump(2) << '\n';
  plot(o, out, s);
  std::printf(
      "gossip-sim: %d peers, %.0f simulated s in %.1f wall s (x%.2f), %llu exchanges, "
      "msd %.4g -> %.4g, max RSS %.0f MB; %s/summary.json\n",
      o.world.peers, simulated, wall, s["sim_over_wall"].get<double>(),
      static_cast<unsigned long long>(s["exchanges_ok"].get<std::uint64_t>()),
      s["msd_initial"].is_null() ? -1.0 : s["msd_initial"].get<double>(),
      s["msd_final"].is_null() ? -1.0 : s["msd_final"].get<double>(), max_rss_mb(), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  apps::sim::SimOptions o;
  try {
    o = apps::sim::parse_sim_options(args);
    if (o.help) {
      std::cout << apps::sim::sim_usage();
      return 0;
    }
    const auto level = spdlog::level::from_str(o.log_level);
    if (level == spdlog::level::off && o.log_level != "off")
      throw UsageError("--log-level: unknown level '" + o.log_level + "'");
    spdlog::set_level(level);
    return run(o, args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gossip-sim: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossip-sim: failed: %s\n", e.what());
    return 1;
  }
}
