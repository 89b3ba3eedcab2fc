// The observability HTTP server against hostile clients: garbage, an oversized request line, a
// client that never finishes its request, hundreds of idle connections. Each is closed within
// the deadline and the server keeps answering real requests.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "net/http_server.hpp"

using namespace gossiptrain;
using namespace std::chrono_literals;

namespace {

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval tv{10, 0};  // a bound on the test's own reads
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends req (as much as the server takes), then reads to EOF; *seconds: from the first byte sent
// to the server's close.
std::string exchange(std::uint16_t port, const std::string& req, double* seconds = nullptr) {
  const int fd = connect_to(port);
  REQUIRE(fd >= 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t off = 0;
  while (off < req.size()) {
    const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed on us mid-request
    off += std::size_t(n);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, std::size_t(n));
  }
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return out;
}

net::HttpServer make_server(std::chrono::milliseconds deadline) {
  net::HttpServerOptions o;
  o.read_deadline = deadline;
  o.max_request_bytes = 8192;
  return net::HttpServer(
      "127.0.0.1", 0,
      [](const std::string& path) {
        if (path == "/metrics") return net::HttpResponse{200, "text/plain", "gossiptrain_up 1\n"};
        return net::HttpResponse{404, "text/plain", "not found\n"};
      },
      o);
}

}  // namespace

TEST_CASE("http server: answers GET, 404 and a bad method", "[net]") {
  auto s = make_server(2000ms);
  const auto r = exchange(s.port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  CHECK_THAT(r, Catch::StartsWith("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(r, Catch::EndsWith("\r\n\r\ngossiptrain_up 1\n"));
  CHECK_THAT(exchange(s.port(), "GET /nope HTTP/1.0\r\n\r\n"), Catch::StartsWith("HTTP/1.1 404"));
  CHECK_THAT(exchange(s.port(), "POST /metrics HTTP/1.1\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 405"));
  CHECK(s.closed_bad() == 0);
}

TEST_CASE("http server: garbage and an oversized request are refused and closed", "[net]") {
  auto s = make_server(1000ms);
  double secs = 0;
  CHECK_THAT(exchange(s.port(), std::string("\x16\x03\x01\x00\xa5garbage\r\n\r\n", 16), &secs),
             Catch::StartsWith("HTTP/1.1 400"));
  CHECK(secs < 1.0);
  // A 1 MB request line: cut at the cap, not read to its end.
  const std::string huge = "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n\r\n";
  const auto r = exchange(s.port(), huge, &secs);
  CHECK((r.empty() || r.rfind("HTTP/1.1 431", 0) == 0));
  CHECK(secs < 2.0);
  CHECK(s.closed_bad() == 2);
  CHECK_THAT(exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200"));
}

TEST_CASE("http server: a client that never finishes its request is closed at the deadline",
          "[net]") {
  auto s = make_server(500ms);
  double secs = 0;
  const auto r = exchange(s.port(), "GET /metrics HTTP/1.1\r\nHost: slow", &secs);
  CHECK(r.empty());
  CHECK(secs >= 0.45);
  CHECK(secs < 2.0);
  CHECK(s.closed_bad() == 1);
}

TEST_CASE("http server: 500 idle connections are all closed, then it answers again", "[net]") {
  auto s = make_server(500ms);
  std::vector<int> fds;
  for (int i = 0; i < 500; ++i) {
    const int fd = connect_to(s.port());
    REQUIRE(fd >= 0);
    fds.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  int closed = 0;
  for (int fd : fds) {
    char b;
    if (::recv(fd, &b, 1, 0) <= 0) ++closed;  // EOF or reset: the server let go of it
    ::close(fd);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(closed == 500);
  CHECK(secs < 5.0);
  CHECK(s.closed_bad() == 500);
  CHECK_THAT(exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 200"));
}

TEST_CASE("http server: the request line parser", "[net]") {
  std::string m, t;
  CHECK(net::parse_request_line("GET /metrics HTTP/1.1\r\n", m, t));
  CHECK(m == "GET");
  CHECK(t == "/metrics");
  CHECK_FALSE(net::parse_request_line("GET  HTTP/1.1\r\n", m, t));
  CHECK_FALSE(net::parse_request_line("GET /a HTTP/2\r\n", m, t));
  CHECK_FALSE(net::parse_request_line("get /a HTTP/1.1\r\n", m, t));
  CHECK_FALSE(net::parse_request_line("GET a HTTP/1.1\r\n", m, t));
  CHECK_FALSE(net::parse_request_line("GET /a\x01 HTTP/1.1\r\n", m, t));
}
