// Helpers for the loopback tests of net/: an event-recording handler, bounded polling, a raw-socket
// hostile client that speaks the handshake through the state machine.
#pragma once

#include <poll.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "net/secure/crypto.hpp"
#include "net/secure/frame.hpp"
#include "net/secure/handshake.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::net::test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The AEADs this machine can run: ChaCha20-Poly1305 always, AES-256-GCM with hardware AES.
inline std::vector<crypto::Aead> aeads() {
  std::vector<crypto::Aead> v{crypto::Aead::ChaCha20Poly1305};
  if (crypto::aes256gcm_available()) v.push_back(crypto::Aead::Aes256Gcm);
  return v;
}

inline crypto::SymKey random_key() {
  crypto::SymKey k;
  crypto::random_bytes(k.span());
  return k;
}

// Polls pred every 2 ms until it holds or the timeout passes.
template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout = 10000ms) {
  auto until = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > until) return pred();
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

inline Limits short_limits() {
  Limits l;
  l.handshake_timeout = 300ms;
  l.idle_timeout = 1000ms;  // loaded CI machines can starve a thread for a few 100 ms
  l.keepalive_interval = 200ms;
  l.close_linger = 300ms;
  return l;
}

// Records what a transport reports; optionally echoes every message back.
struct Recorder : TransportHandler {
  std::mutex mu;
  std::vector<ConnectionPtr> conns;
  std::vector<std::pair<std::uint8_t, Bytes>> msgs;
  std::vector<std::string> closed;  // as logged: cause.text()
  std::vector<CloseCause> causes;
  bool echo = false;
  void on_connection(const ConnectionPtr& c, bool) override {
    std::lock_guard lk(mu);
    conns.push_back(c);
  }
  void on_message(const ConnectionPtr& c, std::uint8_t type, Bytes&& payload) override {
    if (echo) {
      auto p = std::make_shared<const Bytes>(std::move(payload));
      c->send(type, p);
      std::lock_guard lk(mu);
      msgs.emplace_back(type, Bytes());
      return;
    }
    std::lock_guard lk(mu);
    msgs.emplace_back(type, std::move(payload));
  }
  void on_closed(const ConnectionPtr&, const CloseCause& reason) override {
    std::lock_guard lk(mu);
    closed.push_back(reason.text());
    causes.push_back(reason);
  }
  std::size_t n_conns() { std::lock_guard lk(mu); return conns.size(); }
  std::size_t n_msgs() { std::lock_guard lk(mu); return msgs.size(); }
  std::size_t n_closed() { std::lock_guard lk(mu); return closed.size(); }
  std::string last_closed() { std::lock_guard lk(mu); return closed.empty() ? "" : closed.back(); }
  CloseCause last_cause() {
    std::lock_guard lk(mu);
    return causes.empty() ? CloseCause{} : causes.back();
  }
};

// Collects the reasons given to on_handshake_failed.
struct FailureLog {
  std::mutex mu;
  std::vector<std::string> reasons;
  std::function<void(const std::string&, const std::string&)> hook() {
    return [this](const std::string&, const std::string& r) {
      std::lock_guard lk(mu);
      reasons.push_back(r);
    };
  }
  std::size_t size() { std::lock_guard lk(mu); return reasons.size(); }
  std::string last() { std::lock_guard lk(mu); return reasons.empty() ? "" : reasons.back(); }
};

// A loopback address where nothing listens: what a LAN address behind a NAT is to everybody
// outside. The port stays bound (without listen(): a dial is refused) until the test process ends:
// a port bound and closed again was taken by another test process's listener in a clean-clone
// rehearsal (two relay tests at once under ctest -j2), and the "dead" address reached that
// process's peer, whose handshake succeeded (the tests share the network key).
inline std::string dead_addr() {
  static std::mutex mu;
  static asio::io_context io;
  static std::vector<std::unique_ptr<asio::ip::tcp::socket>> held;
  std::lock_guard lk(mu);
  auto s = std::make_unique<asio::ip::tcp::socket>(io);
  s->open(asio::ip::tcp::v4());
  s->bind(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = s->local_endpoint().port();
  held.push_back(std::move(s));
  return "127.0.0.1:" + std::to_string(port);
}

inline TcpTransportConfig make_config(std::uint64_t fingerprint = 7,
                                      Limits limits = short_limits()) {
  TcpTransportConfig c;
  c.identity = std::make_shared<Identity>(Identity::generate());
  c.model_fingerprint = fingerprint;
  c.limits = limits;
  return c;
}

struct DialResult {
  ConnectionPtr conn;
  std::string error;
};

// Dials and waits for the connect callback (bounded).
inline DialResult dial(TcpTransport& t, const std::string& addr) {
  auto p = std::make_shared<std::promise<DialResult>>();
  auto f = p->get_future();
  t.connect(addr, [p](ConnectionPtr c, const CloseCause& e) {
    p->set_value({c, c ? "" : e.text()});
  });
  if (f.wait_for(10s) != std::future_status::ready) return {nullptr, "test: no connect callback"};
  return f.get();
}

// Runs fn on the transport's protocol thread and waits for its result.
template <class F>
auto on_io(TcpTransport& t, F fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::promise<R> p;
  auto f = p.get_future();
  t.post([&] {
    if constexpr (std::is_void_v<R>) {
      fn();
      p.set_value();
    } else {
      p.set_value(fn());
    }
  });
  return f.get();
}

// A hostile (or merely raw) client over a plain socket.
struct RawClient {
  asio::io_context io;
  asio::ip::tcp::socket s{io};
  std::optional<HandshakeResult> session;
  Identity id = Identity::generate();

  explicit RawClient(const std::string& addr) {
    std::string host;
    std::uint16_t port;
    split_host_port(addr, host, port);
    s.connect(asio::ip::tcp::endpoint(asio::ip::make_address(host), port));
  }
  bool write(const Bytes& b) {
    std::error_code ec;
    asio::write(s, asio::buffer(b), ec);
    return !ec;
  }
  // Reads exactly n bytes within the timeout.
  bool read_exact(Bytes& out, std::size_t n, std::chrono::milliseconds timeout = 3000ms) {
    out.resize(n);
    std::size_t got = 0;
    auto until = Clock::now() + timeout;
    while (got < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{s.native_handle(), POLLIN, 0};
      if (::poll(&pfd, 1, int(left.count())) <= 0) return false;
      ssize_t r = ::recv(s.native_handle(), out.data() + got, n - got, 0);
      if (r <= 0) return false;
      got += std::size_t(r);
    }
    return true;
  }
  // Milliseconds until the remote closes (EOF or reset), -1 if it stays open past the timeout.
  long wait_closed(std::chrono::milliseconds timeout = 3000ms) {
    auto start = Clock::now();
    auto until = start + timeout;
    std::uint8_t buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return -1;
      pollfd pfd{s.native_handle(), POLLIN, 0};
      if (::poll(&pfd, 1, int(left.count())) <= 0) return -1;
      ssize_t r = ::recv(s.native_handle(), buf, sizeof buf, 0);
      if (r <= 0)
        return long(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    }
  }
  // Completes the handshake as initiator; false if the server refused.
  bool handshake(std::uint64_t fingerprint = 7, std::optional<crypto::SymKey> net_key = {}) {
    HandshakeParams p;
    p.identity = &id;
    p.fingerprint = fingerprint;
    p.network_key = net_key;
    p.listen_addr = "127.0.0.1:1";
    Handshake hs(Handshake::Role::Initiator, p);
    if (!write(hs.start())) return false;
    Bytes in;
    while (!hs.done() && !hs.failed()) {
      if (!read_exact(in, hs.expected_bytes())) return false;
      Bytes out = hs.on_message(in);
      if (!out.empty() && !write(out)) return false;
    }
    if (!hs.done()) return false;
    session = hs.take_result();
    return true;
  }
  void shutdown_send() {
    std::error_code ec;
    s.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  }
};

// Seals frames for a RawClient session (what an honest sender would put on the wire).
struct RawSealer {
  FrameSealer sealer;
  Bytes buf;
  RawSealer(const HandshakeResult& r, const Limits& l)
      : sealer(r.aead, r.send_key, l), buf(sealer.max_wire_bytes()) {}
  Bytes frame(FrameType t, const Bytes& plain) {
    std::size_t n = sealer.seal(t, plain.data(), plain.size(), buf.data());
    return Bytes(buf.begin(), buf.begin() + n);
  }
  Bytes small_message(std::uint8_t type, const Bytes& payload) {
    Bytes p(1 + payload.size());
    p[0] = type;
    std::copy(payload.begin(), payload.end(), p.begin() + 1);
    return frame(FrameType::Message, p);
  }
  Bytes start(std::uint8_t type, std::uint64_t total) {
    Bytes p(kMessageStartBytes);
    p[0] = type;
    for (int i = 0; i < 8; ++i) p[1 + i] = std::uint8_t(total >> (8 * i));
    return frame(FrameType::MessageStart, p);
  }
};

}  // namespace gossiptrain::net::test
