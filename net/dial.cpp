// connect_within (dial.hpp): resolve, connect and a first write under one deadline.
#include "net/dial.hpp"

#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace gossiptrain::net {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

// What the dial shares with its deadline's handler. The handler may run after the coroutine has
// returned (a timer that expired in the same instant as the connect completed is already queued
// and cancel() cannot take it back), so it holds this, never the coroutine's locals, and acts only
// while the phase is still `dialing`.
struct DialState {
  explicit DialState(asio::io_context& io)
      : resolver(io), sock(std::make_shared<asio::ip::tcp::socket>(io)), timer(io) {}
  asio::ip::tcp::resolver resolver;
  std::shared_ptr<asio::ip::tcp::socket> sock;
  asio::steady_timer timer;
  enum class Phase { dialing, ended } phase = Phase::dialing;
  bool timed_out = false;
};

}  // namespace

asio::awaitable<DialOutcome> connect_within(asio::io_context& io, std::string host,
                                            std::uint16_t port,
                                            std::chrono::steady_clock::time_point deadline,
                                            std::vector<std::uint8_t> first) {
  auto st = std::make_shared<DialState>(io);
  st->timer.expires_at(deadline);
  st->timer.async_wait([st](std::error_code ec) {
    if (ec || st->phase != DialState::Phase::dialing) return;
    st->timed_out = true;
    std::error_code ignored;
    st->resolver.cancel();
    st->sock->close(ignored);
  });
  DialOutcome out;
  auto [rec, results] = co_await st->resolver.async_resolve(host, std::to_string(port), kUseTuple);
  std::error_code cec, wec;
  if (!rec && !results.empty() && !st->timed_out)
    std::tie(cec, std::ignore) = co_await asio::async_connect(*st->sock, results, kUseTuple);
  if (!rec && !results.empty() && !cec && !st->timed_out && !first.empty())
    std::tie(wec, std::ignore) =
        co_await asio::async_write(*st->sock, asio::buffer(first), kUseTuple);
  st->phase = DialState::Phase::ended;
  st->timer.cancel();
  if (st->timed_out) {
    out.timed_out = true;
    out.error = "connect timeout";
  } else if (rec || results.empty()) {
    out.error = "cannot resolve " + host + ": " +
                (rec ? rec.message() : std::string("no address"));
  } else if (cec) {
    out.error = "connect failed: " + cec.message();
  } else if (wec) {
    out.error = "write failed: " + wec.message();
  } else {
    out.sock = st->sock;
  }
  if (!out.sock) {
    std::error_code ignored;
    st->sock->close(ignored);
  }
  co_return out;
}

}  // namespace gossiptrain::net
