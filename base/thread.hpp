// Per-thread scheduling: priority and cpu affinity. A peer's threads compete for the same cores:
// the training loop and the network thread (exchanges, membership). Which one should yield, and
// where each runs, is a deployment choice (gossip-peer --net-nice, --train-nice, --net-cores),
// applied with these.
#pragma once

#include <string>
#include <vector>

namespace gossiptrain::base {

// Raises the calling thread's nice value by `by` (0..19; capped at 19), which lowers its priority
// against the process's other threads. Linux applies setpriority to one thread when given its
// thread id; elsewhere this returns false. Needs no privilege. False with a reason in *error when
// it failed; by <= 0 does nothing and returns true.
bool lower_this_thread_priority(int by, std::string* error = nullptr);

// Pins the calling thread to cpus (no-op for an empty list). False with a reason on failure.
bool pin_this_thread(const std::vector<int>& cpus, std::string* error = nullptr);
// Pins every thread the process has now (the caller and an already started BLAS pool) to cpus.
// Returns how many were pinned; failures are reported in *error.
int pin_all_threads(const std::vector<int>& cpus, std::string* error = nullptr);

}  // namespace gossiptrain::base
