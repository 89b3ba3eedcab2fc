// gossip-sim's command line (docs/sim.md, "gossip-sim"): parsed and checked whole before
// anything runs; every bad value is an apps::UsageError (exit code 2).
#pragma once

#include <string>
#include <vector>

#include "apps/common/options.hpp"
#include "apps/sim/world.hpp"

namespace gossiptrain::apps::sim {

struct SimOptions {
  SimConfig world;
  std::string out;  // run folder; empty: runs/sim-<N>p-<UTC time>
  std::string log_level = "warn";
  bool help = false;
  bool plots = true;  // scripts/plot/plot_sim.py on the run folder at the end
};

// Parses argv (without argv[0]). Throws UsageError naming the flag, also for a churn scenario the
// parser refuses or one with kinds the simulator does not model.
SimOptions parse_sim_options(const std::vector<std::string>& args);
std::string sim_usage();

// "constant:MS", "uniform:LO:HI" (milliseconds, one way) into base latency and jitter.
void parse_latency(const std::string& spec, SimConfig& cfg);

}  // namespace gossiptrain::apps::sim
