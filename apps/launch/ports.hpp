// gossip-launch's ports: choosing the peers' listen ports, and seeing whether a peer listens.
#pragma once

#include <sys/types.h>

#include <vector>

namespace gossiptrain::apps {

// Ports for gossip mode: base_port, base_port+1, ... (each checked free; UsageError if one is
// taken), or with base_port 0 n consecutive free ports below the kernel's ephemeral range (where
// no other process's port-0 socket can take them before the peers bind), all held open together.
std::vector<int> pick_ports(int n, int base_port);

// Whether process pid's network namespace has a socket listening on port (its /proc net table).
bool port_listening(pid_t pid, int port);

}  // namespace gossiptrain::apps
