// gossip-sim's world, what its three files share (world.cpp, world_churn.cpp,
// world_summary.cpp): the record of one crash and the member-state helper.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/sim/world.hpp"
#include "gossip/membership/messages.hpp"

namespace gossiptrain::apps::sim {

// Alive or suspect: a member its observer still counts on.
inline bool live_state(int s) {
  return s == static_cast<int>(gossip::MemberState::Alive) ||
         s == static_cast<int>(gossip::MemberState::Suspect);
}

// One crash or stop: when each peer that was up then marked the victim dead or left.
struct World::Crash {
  int victim = 0;
  double at = 0;
  bool graceful = false;
  bool paused = false;  // a pause (SIGSTOP), not a crash; "restarted" at its resume
  std::string source;
  std::vector<int> observers;
  std::map<int, double> detected;  // observer -> seconds after the crash
  std::optional<double> restarted_after;
};

}  // namespace gossiptrain::apps::sim
