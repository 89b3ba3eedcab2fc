// A small HTTP/1.x GET server for observability endpoints (/metrics, /healthz): its own io_context
// on its own thread, every request read under a byte cap and a deadline, so that hostile or slow
// clients cost a socket for a few seconds at most and never touch the training thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gossiptrain::net {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpServerOptions {
  std::size_t max_request_bytes = 8192;           // request line and headers; more: 431 and closed
  std::chrono::milliseconds read_deadline{5000};  // the whole request must arrive within this
  std::chrono::milliseconds write_deadline{5000};
  // At most this many open at once. A new client past it evicts the oldest connection that has
  // not sent a complete request (idle clients cannot lock out a scraper); only when every open
  // one is being answered is the new one closed on accept.
  std::size_t max_connections = 64;
};

// Serves GET requests with handler(path) (the path without the query). One request per
// connection (Connection: close): a scraper reconnects, and no connection outlives its deadline.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const std::string& path)>;
  // Binds host:port (port 0: any free port) and starts the serving thread. Throws
  // std::runtime_error when the address is bad or cannot be bound.
  HttpServer(const std::string& host, std::uint16_t port, Handler handler,
             HttpServerOptions opts = {});
  ~HttpServer();  // stops the thread and closes every connection
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;  // the bound port
  // Connections closed for garbage, size, deadline or a read error, evicted, or refused: each is
  // counted, and said at info once per kind per 30 s (the rest at debug).
  std::uint64_t closed_bad() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The request line of a raw request head: method and target, or false if it is not
// "METHOD SP TARGET SP HTTP/1.x". Exposed for the tests.
bool parse_request_line(const std::string& head, std::string& method, std::string& target);

}  // namespace gossiptrain::net
