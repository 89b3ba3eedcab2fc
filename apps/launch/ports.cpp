#include "apps/launch/ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "apps/common/options.hpp"

namespace gossiptrain::apps {

// Ports for gossip mode: the user's base port (each one checked free), or ports the OS hands out
// for port 0, all held open together so they differ, then released for the peers.
std::vector<int> pick_ports(int n, int base_port) {
  std::vector<int> ports;
  std::vector<int> fds;
  auto cleanup = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      cleanup();
      throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    }
    fds.push_back(fd);
    // SO_REUSEADDR as the peers' acceptors use it: a port in TIME_WAIT is free, a listener is not.
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(std::uint16_t(base_port ? base_port + i : 0));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      int err = errno;
      cleanup();
      if (base_port)
        throw UsageError("port " + std::to_string(base_port + i) + " on 127.0.0.1 is in use (" +
                         std::strerror(err) + "): pick another --base-port or leave it out");
      throw std::runtime_error(std::string("bind: ") + std::strerror(err));
    }
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ports.push_back(ntohs(a.sin_port));
  }
  cleanup();
  return ports;
}

// Whether something listens on 127.0.0.1:port (or any address), read from /proc/net/tcp so that
// no probe connection shows up in the peer's log as a failed handshake.
bool port_listening(pid_t pid, int port) {
  // The process's own view: with --netns the peer's socket lives in its namespace.
  std::ifstream in("/proc/" + std::to_string(pid) + "/net/tcp");
  std::string line;
  std::getline(in, line);  // header
  char want[8];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string sl, local, remote, st;
    ls >> sl >> local >> remote >> st;
    if (st == "0A" && local.size() >= 5 && local.compare(local.size() - 5, 5, want) == 0) return true;
  }
  return false;
}

}  // namespace gossiptrain::apps
