// The observability HTTP server (see http_server.hpp): accept loop + one coroutine per connection
// with a watchdog timer; every failure closes the connection with a reason in the log.
#include "net/http_server.hpp"

#include <array>
#include <atomic>
#include <list>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "net/repeat_limiter.hpp"

namespace gossiptrain::net {

namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

const char* status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string render(const HttpResponse& r) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + status_text(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += r.body;
  return out;
}

}  // namespace

bool parse_request_line(const std::string& head, std::string& method, std::string& target) {
  const auto eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const auto a = line.find(' ');
  if (a == std::string::npos || a == 0) return false;
  const auto b = line.find(' ', a + 1);
  if (b == std::string::npos || b == a + 1) return false;
  if (line.compare(b + 1, std::string::npos, "HTTP/1.1") != 0 &&
      line.compare(b + 1, std::string::npos, "HTTP/1.0") != 0)
    return false;
  method = line.substr(0, a);
  target = line.substr(a + 1, b - a - 1);
  for (char c : method)
    if (c < 'A' || c > 'Z') return false;
  for (unsigned char c : target)
    if (c <= 0x20 || c >= 0x7f) return false;
  return target[0] == '/';
}

struct HttpServer::Impl {
  asio::io_context io{1};
  asio::ip::tcp::acceptor acceptor{io};
  Handler handler;
  HttpServerOptions opts;
  std::thread thread;
  std::atomic<std::uint64_t> closed_bad{0};
  // One info line per kind of close per 30 s, whoever the clients are (an attacker picks its
  // addresses and ports): 70 idle connections refreshed every 5 s wrote 145 lines in 20 s.
  RepeatLimiter said;

  // What a session shares with its deadline timers and with the accept loop, which may evict it.
  // A timer that expires in the same instant as the read or write it guards has its handler queued
  // already: cancel() cannot take it back, and it runs after the session's frame is gone. So the
  // handlers hold this by shared_ptr, never the frame's locals, and act only in the phase they
  // guard (a stale one does nothing).
  struct Conn {
    Conn(asio::ip::tcp::socket s, std::string w) : sock(std::move(s)), who(std::move(w)) {}
    asio::ip::tcp::socket sock;
    std::string who;
    std::string head;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    enum class Phase { reading, writing, ended } phase = Phase::reading;
    std::list<std::shared_ptr<Conn>>::iterator in_reading;  // while phase == reading
  };
  // Every session of the io thread is open until retire(); those still reading their request are
  // also in `reading`, oldest first: the ones a new client may evict.
  std::size_t open = 0;
  std::list<std::shared_ptr<Conn>> reading;

  // Counts the close of a hostile or useless client and says it, within the limiter's bound.
  void bad(const char* kind, const std::string& who, const std::string& why) {
    ++closed_bad;
    const auto held = said.admit(kind, std::chrono::steady_clock::now());
    if (!held) {
      spdlog::debug("http: closed {}: {}", who, why);
      return;
    }
    std::string also;
    if (*held)
      also = fmt::format(
          " ({} more closed so since the last such line; repeats within {} s are "
          "logged at debug)",
          *held, std::chrono::duration_cast<std::chrono::seconds>(said.quiet()).count());
    spdlog::info("http: closed {}: {}{}", who, why, also);
  }

  // Takes c off the books and closes its socket; its coroutine ends at its next resumption.
  void retire(Conn& c) {
    if (c.phase == Conn::Phase::ended) return;
    if (c.phase == Conn::Phase::reading) reading.erase(c.in_reading);
    c.phase = Conn::Phase::ended;
    --open;
    std::error_code ignored;
    c.sock.close(ignored);
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, sock] = co_await acceptor.async_accept(kUseTuple);
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        spdlog::warn("http: accept failed: {}", ec.message());
        asio::steady_timer pause(io, std::chrono::milliseconds(100));  // e.g. out of files
        co_await pause.async_wait(kUseTuple);
        continue;
      }
      std::error_code ignored;
      const auto ep = sock.remote_endpoint(ignored);
      std::string who = ep.address().to_string() + ":" + std::to_string(ep.port());
      if (open >= opts.max_connections) {
        // A new client is served: idle connections must not lock out the scraper. The oldest
        // one that has not sent a whole request makes room; if every one has and is being
        // answered (each within the write deadline), the newcomer waits for none of them.
        if (reading.empty()) {
          bad("refused", who,
              "too many connections open (" + std::to_string(opts.max_connections) +
                  "), each answering a request");
          sock.close(ignored);
          continue;
        }
        const auto victim = reading.front();
        const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - victim->since);
        bad("evicted", victim->who,
            "evicted for a new connection (" + std::to_string(open) +
                " open): the oldest without a complete request (" +
                std::to_string(victim->head.size()) + " bytes in " + std::to_string(age.count()) +
                " ms)");
        retire(*victim);
      }
      auto c = std::make_shared<Conn>(std::move(sock), std::move(who));
      ++open;
      c->in_reading = reading.insert(reading.end(), c);
      asio::co_spawn(io, session(std::move(c)), asio::detached);
    }
  }

  asio::awaitable<void> session(std::shared_ptr<Conn> c) {
    auto& sock = c->sock;
    auto& head = c->head;
    const std::string& who = c->who;
    // The deadline covers the whole request, not each read: a client trickling a byte a second
    // is as slow as one that sends nothing.
    // Said (and counted) before the close, so that a client which sees the close finds it said.
    asio::steady_timer deadline(io, opts.read_deadline);
    deadline.async_wait([this, c](std::error_code ec) {
      if (ec || c->phase != Conn::Phase::reading) return;
      bad("deadline", c->who,
          "no complete request within " + std::to_string(opts.read_deadline.count()) + " ms (" +
              std::to_string(c->head.size()) + " bytes)");
      retire(*c);
    });
    std::array<char, 1024> buf;
    HttpResponse resp;
    bool have_resp = false;
    while (head.find("\r\n\r\n") == std::string::npos) {
      auto [ec, n] = co_await sock.async_read_some(asio::buffer(buf), kUseTuple);
      if (c->phase != Conn::Phase::reading) {  // closed meanwhile: deadline or evicted, and said
        deadline.cancel();
        co_return;
      }
      if (ec) {
        if (!head.empty() || ec != asio::error::eof)
          bad("read", who,
              "read failed after " + std::to_string(head.size()) + " bytes: " + ec.message());
        deadline.cancel();
        retire(*c);
        co_return;
      }
      head.append(buf.data(), n);
      if (head.size() > opts.max_request_bytes) {
        bad("size", who, "request over " + std::to_string(opts.max_request_bytes) + " bytes");
        resp = {431, "text/plain; charset=utf-8", "request too large\n"};
        have_resp = true;
        break;
      }
    }
    // The request is complete: from here the read deadline must not fire, nor may a new client
    // evict this one.
    reading.erase(c->in_reading);
    c->phase = Conn::Phase::writing;
    deadline.cancel();
    if (!have_resp) resp = answer(who, head);
    // A fresh deadline for the answer: a client that never reads must not hold the socket.
    asio::steady_timer wdeadline(io, opts.write_deadline);
    wdeadline.async_wait([this, c](std::error_code ec) {
      if (ec || c->phase != Conn::Phase::writing) return;
      retire(*c);
    });
    const std::string out = render(resp);
    auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(out), kUseTuple);
    if (wec) spdlog::debug("http: answer to {} not sent: {}", who, wec.message());
    wdeadline.cancel();
    std::error_code ignored;
    sock.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    retire(*c);
  }

  HttpResponse answer(const std::string& who, const std::string& head) {
    std::string method, target;
    if (!parse_request_line(head, method, target)) {
      bad("request", who, "not an HTTP request line");
      return {400, "text/plain; charset=utf-8", "bad request\n"};
    }
    if (method != "GET") return {405, "text/plain; charset=utf-8", "GET only\n"};
    const std::string path = target.substr(0, target.find('?'));
    try {
      return handler(path);
    } catch (const std::exception& e) {
      spdlog::warn("http: handler for {} failed: {}", path, e.what());
      return {503, "text/plain; charset=utf-8", "unavailable\n"};
    }
  }
};

HttpServer::HttpServer(const std::string& host, std::uint16_t port, Handler handler,
                       HttpServerOptions opts)
    : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->opts = opts;
  std::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("http: bad listen address '" + host + "' (want an IP address)");
  const asio::ip::tcp::endpoint ep(addr, port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec)
    throw std::runtime_error("http: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             ec.message());
  impl_->acceptor.listen(asio::socket_base::max_listen_connections);
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([io = &impl_->io] { io->run(); });
}

HttpServer::~HttpServer() {
  asio::post(impl_->io, [this] {
    std::error_code ignored;
    impl_->acceptor.close(ignored);
  });
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }
std::uint64_t HttpServer::closed_bad() const { return impl_->closed_bad.load(); }

}  // namespace gossiptrain::net
