// Per-thread scheduling priority. A peer's threads compete for the same cores: the training loop
// and the network thread (exchanges, membership). Which one should yield is a deployment choice
// (gossip-peer --net-nice / --train-nice), applied with these.
#pragma once

#include <string>

namespace gossiptrain::core {

// Raises the calling thread's nice value by `by` (0..19; capped at 19), which lowers its priority
// against the process's other threads. Linux applies setpriority to one thread when given its
// thread id; elsewhere this returns false. Needs no privilege. False with a reason in *error when
// it failed; by <= 0 does nothing and returns true.
bool lower_this_thread_priority(int by, std::string* error = nullptr);

}  // namespace gossiptrain::core
