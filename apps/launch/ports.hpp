// gossip-launch's ports: choosing the peers' listen ports, and seeing whether a peer listens.
#pragma once

#include <sys/types.h>

#include <vector>

namespace gossiptrain::apps {

// Ports for gossip mode: base_port, base_port+1, ... (each checked free; UsageError if one is
// taken), or with base_port 0 n consecutive free ports below the kernel's ephemeral range (where
// no other process's port-0 socket can take them before the peers bind), all held open together.
std::vector<int> pick_ports(int n, int base_port);

// A socket bound to 127.0.0.1:port (0: one the OS picks), SO_REUSEADDR as the peers' acceptors use
// it (a port in TIME_WAIT is free, a listener is not); -1 with errno set when it does not bind.
int bind_port(int port);

// The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range; 32768 if unread).
int ephemeral_port_low();

// Whether process pid's network namespace has a socket listening on port (its /proc net table).
bool port_listening(pid_t pid, int port);

}  // namespace gossiptrain::apps
