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
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "apps/common/options.hpp"

namespace gossiptrain::apps {

int bind_port(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(std::uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

namespace {
int port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

struct Held {
  std::vector<int> fds;
  ~Held() {
    for (int fd : fds) ::close(fd);
  }
};
}  // namespace

int ephemeral_port_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  return in >> lo >> hi && lo > 0 ? lo : 32768;
}

// Ports for gossip mode: the user's base port (each one checked free), or without one n ports
// below the kernel's ephemeral range, at a random place in [10000, range start), all bound
// together so they differ, then released for the peers. Below that range the kernel hands no port
// out by itself: a port it gave for port 0 and we released was the next one it gave another
// process's outbound connection or listener, and a peer then could not bind its own. Where the
// range leaves no room below it, the ports the OS hands out for port 0.
std::vector<int> pick_ports(int n, int base_port) {
  std::vector<int> ports;
  if (base_port) {
    Held held;
    for (int i = 0; i < n; ++i) {
      const int fd = bind_port(base_port + i);
      if (fd < 0)
        throw UsageError("port " + std::to_string(base_port + i) + " on 127.0.0.1 is in use (" +
                         std::strerror(errno) + "): pick another --base-port or leave it out");
      held.fds.push_back(fd);
      ports.push_back(base_port + i);
    }
    return ports;
  }
  const int top = ephemeral_port_low();
  if (top - 10000 >= 4 * n) {
    std::random_device rd;
    std::mt19937 rng(rd());
    std::uniform_int_distribution<int> pick(10000, top - n);
    for (int attempt = 0; attempt < 100; ++attempt) {
      Held held;
      const int base = pick(rng);
      for (int i = 0; i < n; ++i) {
        const int fd = bind_port(base + i);
        if (fd < 0) break;
        held.fds.push_back(fd);
      }
      if (static_cast<int>(held.fds.size()) == n) {
        for (int i = 0; i < n; ++i) ports.push_back(base + i);
        return ports;
      }
    }
  }
  Held held;
  for (int i = 0; i < n; ++i) {
    const int fd = bind_port(0);
    if (fd < 0) throw std::runtime_error(std::string("bind: ") + std::strerror(errno));
    held.fds.push_back(fd);
    ports.push_back(port_of(fd));
  }
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
