// gossip-launch --netns's network (apps/launch_netns): hosts talk TCP between their addresses, a
// partition blocks traffic between groups only, a link cap limits the measured rate, link loss
// drops a share of datagrams, and nothing is left behind. Needs root, ip, nft and tc: each test
// skips (WARN) without them. Sockets are opened inside a host's namespace by a short-lived thread
// that setns()es into it (a socket stays in the namespace it was created in), so no helper
// program is needed.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "apps/launch/netns.hpp"

using gossiptrain::apps::NetnsSwarm;
using Clock = std::chrono::steady_clock;

namespace {

#define GT_NETNS_OR_SKIP()                     \
  do {                                         \
    std::string why_;                          \
    if (!NetnsSwarm::check_available(&why_)) { \
      WARN("skipped: " << why_);               \
      return;                                  \
    }                                          \
  } while (0)

// A socket created inside namespace ns (-1 on failure).
int socket_in(const std::string& ns, int type) {
  int fd = -1;
  std::thread t([&] {
    int nsfd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) return;
    if (::setns(nsfd, CLONE_NEWNET) == 0) fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    ::close(nsfd);
  });
  t.join();
  return fd;
}

sockaddr_in addr_of(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// Owns a file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & events);
}

Fd bound_socket(const NetnsSwarm& s, int host, int type, int port) {
  Fd fd(socket_in(s.ns(host), type));
  if (fd.fd < 0) return fd;
  int one = 1;
  ::setsockopt(fd.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = addr_of(s.ip(host), port);
  if (::bind(fd.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Fd();
  if ((type & 0xf) == SOCK_STREAM && ::listen(fd.fd, 4) != 0) return Fd();
  return fd;
}

// A TCP connection from host `from` to host `to` (through a listener on `to`): {client, server},
// both non-blocking; {-1,-1} if it cannot be made within timeout_ms.
std::pair<Fd, Fd> tcp_pair(const NetnsSwarm& s, int from, int to, int port, int timeout_ms) {
  Fd lis = bound_socket(s, to, SOCK_STREAM | SOCK_NONBLOCK, port);
  Fd cli(socket_in(s.ns(from), SOCK_STREAM | SOCK_NONBLOCK));
  if (lis.fd < 0 || cli.fd < 0) return {};
  sockaddr_in a = addr_of(s.ip(to), port);
  if (::connect(cli.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)
    return {};
  int err = 0;
  socklen_t len = sizeof err;
  if (!wait_fd(cli.fd, POLLOUT, timeout_ms) ||
      ::getsockopt(cli.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
    return {};
  if (!wait_fd(lis.fd, POLLIN, timeout_ms)) return {};
  Fd srv(::accept4(lis.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (srv.fd < 0) return {};
  return {std::move(cli), std::move(srv)};
}

// Whether host a can open a TCP connection to host b and send it a few bytes.
bool can_talk(const NetnsSwarm& s, int a, int b, int timeout_ms = 400) {
  auto [cli, srv] = tcp_pair(s, a, b, 7000 + b, timeout_ms);
  if (cli.fd < 0 || ::send(cli.fd, "ping", 4, MSG_NOSIGNAL) != 4) return false;
  char buf[8] = {};
  return wait_fd(srv.fd, POLLIN, timeout_ms) && ::recv(srv.fd, buf, sizeof buf, 0) == 4 &&
         std::string(buf, 4) == "ping";
}

// Mbit/s received by host `to` from host `from` over TCP, sending as fast as possible for
// `seconds` (-1 if no connection).
double tcp_rate_mbit(const NetnsSwarm& s, int from, int to, double seconds) {
  auto [cli, srv] = tcp_pair(s, from, to, 7100, 2000);
  if (cli.fd < 0) return -1;
  std::vector<char> out(64 * 1024, 'x'), in(256 * 1024);
  long long got = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    pollfd p[2] = {{cli.fd, POLLOUT, 0}, {srv.fd, POLLIN, 0}};
    ::poll(p, 2, 20);
    if (p[0].revents & POLLOUT) (void)::send(cli.fd, out.data(), out.size(), MSG_NOSIGNAL);
    if (p[1].revents & POLLIN) {
      ssize_t n = ::recv(srv.fd, in.data(), in.size(), 0);
      if (n > 0) got += n;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(got) * 8.0 / secs / 1e6;
}

// How many of n UDP datagrams sent from host `from` reach host `to` (sent in paced batches and
// drained as they come, so no queue on the way overflows).
int udp_delivered(const NetnsSwarm& s, int from, int to, int n) {
  Fd rx = bound_socket(s, to, SOCK_DGRAM | SOCK_NONBLOCK, 7200);
  Fd tx(socket_in(s.ns(from), SOCK_DGRAM | SOCK_NONBLOCK));
  if (rx.fd < 0 || tx.fd < 0) return -1;
  sockaddr_in a = addr_of(s.ip(to), 7200);
  char buf[64] = {};
  int got = 0;
  auto drain = [&](int quiet_ms) {
    while (wait_fd(rx.fd, POLLIN, quiet_ms))
      while (::recv(rx.fd, buf, sizeof buf, 0) > 0) ++got;
  };
  for (int sent = 0; sent < n; ++sent) {
    (void)::sendto(tx.fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (sent % 50 == 49) drain(1);
  }
  drain(200);
  return got;
}

bool namespace_left(const std::string& run_id) {
  auto r = gossiptrain::apps::run_command({"/bin/sh", "-c", "ip netns list"});
  return r.output.find("gt-" + run_id + "-") != std::string::npos;
}

}  // namespace

TEST_CASE("netns: addresses and run ids", "[netns]") {
  CHECK(NetnsSwarm::address(0) == "10.88.0.1");
  CHECK(NetnsSwarm::address(249) == "10.88.0.250");
  CHECK(NetnsSwarm::address(250) == "10.88.1.1");
  CHECK(NetnsSwarm::address(NetnsSwarm::kMaxHosts - 1) == "10.88.3.250");
  CHECK_THROWS_AS(NetnsSwarm("has-dash", 2), std::invalid_argument);
  CHECK_THROWS_AS(NetnsSwarm("", 2), std::invalid_argument);
  CHECK_THROWS_AS(NetnsSwarm("abc", 0), std::invalid_argument);
  CHECK_THROWS_AS(NetnsSwarm::cleanup_stale("a b"), std::invalid_argument);
  CHECK(NetnsSwarm::make_run_id() != NetnsSwarm::make_run_id());
  gossiptrain::apps::PartitionState p;
  CHECK(p.connected(0, 5));
  CHECK(p.describe() == "none");
  p.groups = {{0, 1}, {2}};
  CHECK(p.group_of(1) == 0);
  CHECK(p.group_of(7) == 2);
  CHECK(!p.connected(0, 2));
  CHECK(p.connected(3, 4));
  CHECK(p.isolated(4) == std::vector<int>{2, 3});
  CHECK(p.describe() == "[0,1] | [2] | rest");
}

TEST_CASE("netns: two hosts talk TCP between their own addresses", "[netns]") {
  GT_NETNS_OR_SKIP();
  NetnsSwarm s(NetnsSwarm::make_run_id(), 4);
  s.add_host(0);
  s.add_host(1);
  s.add_host(1);  // again: nothing happens
  CHECK(s.hosts() == std::vector<int>{0, 1});
  CHECK(can_talk(s, 0, 1, 2000));
  CHECK(can_talk(s, 1, 0, 2000));
  // exec_prefix runs a program on the host: it sees its own address and nothing of the others'.
  auto argv = s.exec_prefix(1);
  argv.insert(argv.end(), {argv[0], "-4", "-o", "addr", "show"});
  auto r = gossiptrain::apps::run_command(argv);
  INFO(r.output);
  CHECK(r.rc == 0);
  CHECK(r.output.find(s.ip(1) + "/16") != std::string::npos);
  CHECK(r.output.find(s.ip(0) + "/") == std::string::npos);
  CHECK_THROWS_AS(s.add_host(4), std::invalid_argument);
  CHECK_THROWS_AS(s.set_link(2, 10.0, std::nullopt), std::invalid_argument);  // not added
}

TEST_CASE("netns: a partition blocks traffic between groups only, heal restores it", "[netns]") {
  GT_NETNS_OR_SKIP();
  NetnsSwarm s(NetnsSwarm::make_run_id(), 5);
  for (int i = 0; i < 4; ++i) s.add_host(i);
  REQUIRE(can_talk(s, 0, 2, 2000));
  s.partition({{0, 1}, {2}});  // 3 is named nowhere: a group of its own
  CHECK(s.partition_state().isolated(4) == std::vector<int>{2, 3});
  CHECK(can_talk(s, 0, 1));
  CHECK(can_talk(s, 1, 0));
  CHECK(!can_talk(s, 0, 2));
  CHECK(!can_talk(s, 2, 1));
  CHECK(!can_talk(s, 3, 0));
  // Another partition replaces it; a host added meanwhile joins the implicit group at once.
  s.partition({{0}, {1, 2}});
  s.add_host(4);
  CHECK(can_talk(s, 3, 4));
  CHECK(can_talk(s, 2, 1));
  CHECK(!can_talk(s, 1, 0));
  CHECK(!can_talk(s, 4, 2));
  CHECK_THROWS_AS(s.partition({{0, 1}, {1}}), std::invalid_argument);
  CHECK_THROWS_AS(s.partition({{0}, {5}}), std::invalid_argument);
  s.heal();
  CHECK(!s.partition_state().active());
  CHECK(can_talk(s, 1, 0, 2000));
  CHECK(can_talk(s, 4, 2, 2000));
}

TEST_CASE("netns: a link cap limits the measured TCP rate in both directions", "[netns]") {
  GT_NETNS_OR_SKIP();
  NetnsSwarm s(NetnsSwarm::make_run_id(), 2);
  s.add_host(0);
  s.add_host(1);
  const double free_rate = tcp_rate_mbit(s, 0, 1, 0.4);
  s.set_link(1, 10.0, std::nullopt);
  CHECK(s.link(1).rate_mbit == 10.0);
  const double into = tcp_rate_mbit(s, 0, 1, 1.5);    // capped at the bridge port towards 1
  const double out_of = tcp_rate_mbit(s, 1, 0, 1.5);  // capped at host 1's eth0
  s.clear_link(1);
  CHECK(!s.link(1).shaped());
  const double again = tcp_rate_mbit(s, 0, 1, 0.4);
  WARN("TCP Mbit/s: uncapped " << free_rate << ", cap 10: into " << into << ", out of " << out_of
                               << ", cleared " << again);
  CHECK(free_rate > 100.0);
  CHECK(into > 5.0);
  CHECK(into < 15.0);
  CHECK(out_of > 5.0);
  CHECK(out_of < 15.0);
  CHECK(again > 100.0);
}

TEST_CASE("netns: link loss drops a share of datagrams both ways, clear_link ends it", "[netns]") {
  GT_NETNS_OR_SKIP();
  NetnsSwarm s(NetnsSwarm::make_run_id(), 2);
  s.add_host(0);
  s.add_host(1);
  REQUIRE(can_talk(s, 0, 1, 2000));  // neighbours resolved before anything is dropped
  REQUIRE(can_talk(s, 1, 0, 2000));
  CHECK(udp_delivered(s, 0, 1, 1000) >= 990);
  s.set_link(1, std::nullopt, 0.5);
  CHECK(s.link(1).loss == 0.5);
  const int into = udp_delivered(s, 0, 1, 1000);
  const int out_of = udp_delivered(s, 1, 0, 1000);
  const long long drops = s.loss_drops(1);
  s.clear_link(1);
  const int after = udp_delivered(s, 0, 1, 1000);
  WARN("UDP delivered of 1000 at loss 0.5: into " << into << ", out of " << out_of << " (nft drops "
                                                  << drops << "); cleared " << after);
  CHECK(into > 350);
  CHECK(into < 650);
  CHECK(out_of > 350);
  CHECK(out_of < 650);
  CHECK(drops >= 2000 - into - out_of);
  CHECK(after >= 990);
  CHECK(s.loss_drops(1) == 0);
  CHECK_THROWS_AS(s.set_link(1, std::nullopt, 1.5), std::invalid_argument);
  CHECK_THROWS_AS(s.set_link(1, -1.0, std::nullopt), std::invalid_argument);
}

TEST_CASE("netns: the destructor and cleanup_stale leave no namespace behind", "[netns]") {
  GT_NETNS_OR_SKIP();
  const std::string id = NetnsSwarm::make_run_id();
  {
    NetnsSwarm s(id, 3);
    s.add_host(0);
    s.add_host(2);
    s.set_link(2, 5.0, 0.1);
    s.partition({{0}, {2}});
    CHECK(namespace_left(id));
    // The same run id twice: a clear error naming the command, and the first run is untouched.
    try {
      NetnsSwarm again(id, 3);
      FAIL("a second swarm with the same run id was created");
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::Contains("netns add gt-" + id + "-br"));
    }
    CHECK(can_talk(s, 0, 0, 2000));
  }
  CHECK(!namespace_left(id));
  // A launcher that crashed: a child builds a swarm and exits without its destructor.
  const std::string crashed = id + "c", alive = id + "cx";  // one a prefix of the other
  struct Guard {
    std::string id;
    ~Guard() { NetnsSwarm::cleanup_stale(id); }
  } guard{crashed};
  NetnsSwarm live(alive, 2);
  live.add_host(0);
  pid_t pid = ::fork();
  if (pid == 0) {
    try {
      NetnsSwarm s(crashed, 2);
      s.add_host(0);
      s.add_host(1);
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  REQUIRE(pid > 0);
  int status = -1;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (::waitpid(pid, &status, WNOHANG) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(namespace_left(crashed));
  CHECK(NetnsSwarm::cleanup_stale(crashed) == 3);
  CHECK(!namespace_left(crashed));
  CHECK(namespace_left(alive));  // another run's namespaces are untouched
  CHECK(can_talk(live, 0, 0, 2000));
  CHECK(NetnsSwarm::cleanup_stale(crashed) == 0);
}

// Hidden ([.]): a swarm of a size gossip-launch may use, for timings (run with '[netns-scale]').
TEST_CASE("netns: sixty hosts, partitioned in two", "[.][netns-scale]") {
  GT_NETNS_OR_SKIP();
  NetnsSwarm s(NetnsSwarm::make_run_id(), 64);
  auto t0 = Clock::now();
  for (int i = 0; i < 60; ++i) s.add_host(i);
  auto t1 = Clock::now();
  std::vector<int> a, b;
  for (int i = 0; i < 60; ++i) (i < 30 ? a : b).push_back(i);
  s.partition({a, b});
  auto t2 = Clock::now();
  for (int i = 0; i < 60; ++i) s.set_link(i, 50.0, 0.01);
  auto t3 = Clock::now();
  auto sec = [](auto d) { return std::chrono::duration<double>(d).count(); };
  WARN("60 hosts: add " << sec(t1 - t0) << " s, partition " << sec(t2 - t1) << " s, set_link "
                        << sec(t3 - t2) << " s");
  CHECK(can_talk(s, 0, 29, 2000));
  CHECK(can_talk(s, 59, 30, 2000));
  CHECK(!can_talk(s, 0, 59));
}
