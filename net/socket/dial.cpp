// connect_within (dial.hpp): resolve, connect and a first write under one deadline.
#include "net/socket/dial.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace gossiptrain::net {
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

// A name lookup on a thread of its own, detached. Asio's resolver runs getaddrinfo on one
// background thread per io_context, which its destructor joins: a peer whose last dial looked up
// a departed pod's name sat 10-31 s after "done" (5 s per DNS try), and one slow lookup held up
// every other dial's. This one is abandoned when the dial ends or its io_context goes; the thread
// finishes the lookup on its own and frees what it shares.
struct Lookup {
  std::mutex mu;
  bool done = false;
  int rc = 0;  // getaddrinfo's
  std::vector<asio::ip::tcp::endpoint> eps;
};

std::atomic<int> g_lookups_in_flight{0};

// nullptr when kMaxNameLookups are in flight already (the slot is taken in one atomic step, so
// transports on several threads cannot pass the bound together).
std::shared_ptr<Lookup> start_lookup(const std::string& host, std::uint16_t port) {
  if (g_lookups_in_flight.fetch_add(1) >= kMaxNameLookups) {
    g_lookups_in_flight.fetch_sub(1);
    return nullptr;
  }
  auto lk = std::make_shared<Lookup>();
  std::thread([lk, host, port] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    std::vector<asio::ip::tcp::endpoint> eps;
    for (addrinfo* a = res; rc == 0 && a; a = a->ai_next) {
      if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
      asio::ip::tcp::endpoint ep;
      std::memcpy(ep.data(), a->ai_addr, a->ai_addrlen);
      eps.push_back(ep);
    }
    if (res) ::freeaddrinfo(res);
    {
      std::lock_guard<std::mutex> g(lk->mu);
      lk->rc = rc;
      lk->eps = std::move(eps);
      lk->done = true;
    }
    g_lookups_in_flight.fetch_sub(1);
  }).detach();
  return lk;
}

// What the dial shares with its deadline's handler. The handler may run after the coroutine has
// returned (a timer that expired in the same instant as the connect completed is already queued
// and cancel() cannot take it back), so it holds this, never the coroutine's locals, and acts only
// while the phase is still `dialing`.
struct DialState {
  explicit DialState(asio::io_context& io)
      : sock(std::make_shared<asio::ip::tcp::socket>(io)), timer(io), poll(io) {}
  std::shared_ptr<asio::ip::tcp::socket> sock;
  asio::steady_timer timer;
  asio::steady_timer poll;  // while a name lookup runs
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
    st->poll.cancel();
    st->sock->close(ignored);
  });
  DialOutcome out;
  std::vector<asio::ip::tcp::endpoint> eps;
  std::string resolve_error;
  std::error_code aec;
  const auto addr = asio::ip::make_address(host, aec);
  if (!aec) {
    eps.emplace_back(addr, port);  // an address: nothing to look up
  } else if (const auto lk = start_lookup(host, port); !lk) {
    resolve_error = "too many name lookups in flight (" + std::to_string(kMaxNameLookups) +
                    "): is DNS answering?";
  } else {
    // Polled: the lookup's thread never touches the io_context, which may be gone when it ends.
    for (;;) {
      {
        std::lock_guard<std::mutex> g(lk->mu);
        if (lk->done) {
          if (lk->rc != 0) resolve_error = ::gai_strerror(lk->rc);
          eps = std::move(lk->eps);
          break;
        }
      }
      if (st->timed_out) break;
      st->poll.expires_after(std::chrono::milliseconds(5));
      co_await st->poll.async_wait(kUseTuple);
    }
  }
  const bool resolved = eps.size() > 0;
  // A deadline already past (its handler not run yet) is one: a loopback connect completes before
  // the timer's expiry is even seen.
  if (std::chrono::steady_clock::now() >= deadline) st->timed_out = true;
  std::error_code cec, wec;
  if (resolved && !st->timed_out)
    std::tie(cec, std::ignore) = co_await asio::async_connect(*st->sock, eps, kUseTuple);
  if (resolved && !cec && !st->timed_out && !first.empty())
    std::tie(wec, std::ignore) =
        co_await asio::async_write(*st->sock, asio::buffer(first), kUseTuple);
  st->phase = DialState::Phase::ended;
  st->timer.cancel();
  if (st->timed_out) {
    out.timed_out = true;
    out.error = "connect timeout";
  } else if (!resolved) {
    out.error = "cannot resolve " + host + ": " +
                (resolve_error.empty() ? std::string("no address") : resolve_error);
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
