// Flags are parsed once, in the flag table, into typed values: a bad value is a usage error (exit
// code 2, the flag named) before the peer loads data or opens a socket.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/system_process.hpp"

using namespace std::chrono_literals;

TEST_CASE("gossip-peer refuses a bad --wire at parse time with exit code 2, naming the flag",
          "[system]") {
  gt_test::TempDir tmp("gt-usage");
  std::string out;
  const int rc = gt_test::run_app("gossip-peer",
                                  {"--wire", "int3", "--data", "synthetic", "--epochs", "1",
                                   "--identity", tmp / "id.key"},
                                  tmp / "peer.log", &out, 60s);
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find("--wire") != std::string::npos);
  CHECK(out.find("int3") != std::string::npos);
  CHECK(out.find("fp32|fp16|bf16|int8") != std::string::npos);  // what it takes
  // Nothing ran: no identity was created, no data loaded.
  CHECK_FALSE(std::filesystem::exists(tmp / "id.key"));
}

TEST_CASE("gossip-peer on a port in use exits 2 saying so, without pointing at --help",
          "[system]") {
  gt_test::TempDir tmp("gt-usage");
  // Another program listens on the port (a second job on the node, in the issue).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string listen = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::string out;
  const int rc = gt_test::run_app("gossip-peer",
                                  {"--listen", listen, "--data", "synthetic", "--epochs", "1",
                                   "--identity", tmp / "id.key"},
                                  tmp / "peer.log", &out, 60s);
  ::close(fd);
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find("cannot listen on " + listen) != std::string::npos);
  CHECK(out.find("in use") != std::string::npos);
  CHECK(out.find("--help") == std::string::npos);
}

TEST_CASE("a mistyped flag is answered with the nearest one and exit code 2, in gossip-peer, "
          "gossip-launch and gossip-sim",
          "[system]") {
  gt_test::TempDir tmp("gt-usage-typo");
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"gossip-peer", {"--epoch", "3", "--data", "synthetic", "--identity", tmp / "id.key"}},
      {"gossip-launch", {"--peers", "2", "--data", "synthetic", "--epoch", "3", "--out",
                         tmp / "run"}},
      {"gossip-sim", {"--peers", "2", "--workload", "train", "--data", "synthetic", "--epoch", "3",
                      "--out", tmp / "sim"}},
  };
  for (const auto& [app, args] : runs) {
    INFO(app);
    std::string out;
    const int rc = gt_test::run_app(app, args, tmp / (app + ".log"), &out, 60s);
    INFO(out);
    CHECK(rc == 2);
    CHECK(out.find("unknown flag '--epoch'; did you mean '--epochs'?") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(tmp / "id.key"));
  CHECK_FALSE(std::filesystem::exists(tmp / "run"));
  CHECK_FALSE(std::filesystem::exists(tmp / "sim"));
}
