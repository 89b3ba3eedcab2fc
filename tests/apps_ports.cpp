// gossip-launch's ports (apps/launch/ports.cpp): without --base-port, N consecutive ports below the
// kernel's ephemeral range that bind now; with one, those ports or a UsageError naming the taken one.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include "apps/common/options.hpp"
#include "apps/launch/ports.hpp"

using namespace gossiptrain::apps;

namespace {
// Whether port binds now (then released again).
bool binds(int port) {
  const int fd = bind_port(port);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}
}  // namespace

TEST_CASE("gossip-launch's free ports are consecutive, free, and below the ephemeral range",
          "[apps]") {
  const int low = ephemeral_port_low();
  if (low < 10000 + 4 * 8) {
    WARN("skipped: the ephemeral range starts at " << low << ", no room below it");
    return;
  }
  for (int round = 0; round < 5; ++round) {
    const std::vector<int> p = pick_ports(8, 0);
    REQUIRE(p.size() == 8);
    for (std::size_t i = 0; i < p.size(); ++i) {
      INFO("port " << p[i]);
      CHECK(p[i] >= 10000);
      CHECK(p[i] < low);
      CHECK(p[i] == p[0] + static_cast<int>(i));
      CHECK(binds(p[i]));  // released for the peers
    }
  }
}

TEST_CASE("gossip-launch's --base-port names a port that is taken", "[apps]") {
  const std::vector<int> p = pick_ports(1, 0);
  const int fd = bind_port(p[0] + 1);
  REQUIRE(fd >= 0);
  REQUIRE(::listen(fd, 1) == 0);
  try {
    pick_ports(3, p[0]);
    FAIL("no error for a port in use");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("port " + std::to_string(p[0] + 1) + " on 127.0.0.1 is in use") !=
          std::string::npos);
  }
  ::close(fd);
}
