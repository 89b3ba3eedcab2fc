// The behaviour every Transport shares, as one suite run over both implementations: the seeded
// in-memory network (net/memory/memory_transport.hpp) and TCP over loopback (net/tcp/tcp_transport.hpp).
// What only one of them does (simulated latency, loss and partitions; sockets, handshakes and
// limits) is tested in net_memory_transport.cpp and net_tcp_transport.cpp.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "net/memory/memory_transport.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

// The Recorders of a fixture's server and client: a base, so that they outlive the transports
// (members of the fixture) that report to them.
struct Events {
  // Makes the Recorders the handlers of the two transports.
  void attach(Transport& server, Transport& client) {
    server.set_handler(&server_events);
    client.set_handler(&client_events);
  }
  Recorder server_events, client_events;
};

// Each fixture holds a server and a client transport, each reporting to a Recorder, and offers:
//   dial(addr)      dials from the client and waits for the connect callback;
//   wait_for(pred)  runs the network (memory) or polls (tcp) until pred holds;
//   on_io(fn)       runs fn on the client's protocol thread and returns its result;
//   unreachable()   an address nobody listens on; a dial to it fails with kConnectError;
// and kRemoteClose, what the remote end's on_closed reason starts with.
struct MemoryFixture : Events {
  static constexpr const char* kConnectError = "connect timeout";
  static constexpr const char* kRemoteClose = "remote_closed: ";

  MemoryFixture() { attach(server, client); }
  DialResult dial(const std::string& addr) {
    DialResult r{nullptr, "test: no connect callback"};
    bool done = false;
    client.connect(addr, [&](ConnectionPtr c, const CloseCause& e) {
      r = {c, c ? "" : e.text()};
      done = true;
    });
    wait_for([&] { return done; });
    return r;
  }
  template <class Pred>
  bool wait_for(Pred pred) {
    while (!pred()) {
      if (!net.step()) return pred();
    }
    return true;
  }
  // The thread that drives the network is the protocol thread of every node.
  template <class F>
  auto on_io(F fn) {
    return fn();
  }
  static std::string unreachable() { return "nowhere:1"; }

  static SimOptions options() {
    SimOptions o;
    o.latency = 5ms;
    o.connect_timeout = 500ms;
    return o;
  }

  SimNetwork net{options()};
  SimTransport& server = net.add_node("server:1", "SERVER");
  SimTransport& client = net.add_node("client:1", "CLIENT");
};

struct TcpFixture : Events {
  static constexpr const char* kConnectError = "connect failed";
  static constexpr const char* kRemoteClose = "remote_closed: ";

  TcpFixture() {
    attach(server, client);
    server.start();
    client.start();
  }
  DialResult dial(const std::string& addr) { return test::dial(client, addr); }
  template <class Pred>
  bool wait_for(Pred pred) {
    return test::wait_for(pred);
  }
  template <class F>
  auto on_io(F fn) {
    return test::on_io(client, fn);
  }
  // A loopback port held bound without listening (net_test_util.hpp).
  static std::string unreachable() { return dead_addr(); }

  TcpTransport server{make_config()};
  TcpTransport client{make_config()};
};

SharedBytes shared(Bytes b) { return std::make_shared<const Bytes>(std::move(b)); }

}  // namespace

TEMPLATE_TEST_CASE("transport: a dial connects both ends under the peers' ids", "[net]",
                   MemoryFixture, TcpFixture) {
  TestType f;
  const DialResult r = f.dial(f.server.listen_addr());
  REQUIRE(r.error.empty());
  REQUIRE(r.conn);
  CHECK(r.conn->peer_id() == f.server.local_id());
  CHECK(r.conn->remote_addr() == f.server.listen_addr());
  REQUIRE(f.wait_for([&] { return f.server_events.n_conns() == 1; }));
  std::lock_guard lk(f.server_events.mu);
  CHECK(f.server_events.conns[0]->peer_id() == f.client.local_id());
  // Inbound: the dialer's ephemeral port, not its listen address.
  CHECK(f.server_events.conns[0]->remote_addr() != f.client.listen_addr());
}

TEMPLATE_TEST_CASE("transport: messages arrive in order with their types and payloads", "[net]",
                   MemoryFixture, TcpFixture) {
  TestType f;
  const DialResult r = f.dial(f.server.listen_addr());
  REQUIRE(r.conn);
  const int kMessages = 50;
  auto message = [](int i) { return Bytes(std::size_t(i * 1000), std::uint8_t(i)); };
  f.on_io([&] {
    for (int i = 0; i < kMessages; ++i) REQUIRE(r.conn->send(std::uint8_t(i), shared(message(i))));
  });
  REQUIRE(f.wait_for([&] { return f.server_events.n_msgs() == kMessages; }));
  std::lock_guard lk(f.server_events.mu);
  for (int i = 0; i < kMessages; ++i) {
    CHECK(f.server_events.msgs[i].first == i);
    CHECK(f.server_events.msgs[i].second == message(i));
  }
}

TEMPLATE_TEST_CASE("transport: close reports on_closed once on both ends after the data before it",
                   "[net]", MemoryFixture, TcpFixture) {
  TestType f;
  const DialResult r = f.dial(f.server.listen_addr());
  REQUIRE(r.conn);
  REQUIRE(f.wait_for([&] { return f.server_events.n_conns() == 1; }));
  f.on_io([&] {
    CHECK(r.conn->send(1, shared({1, 2, 3})));
    r.conn->close(CloseReason::Shutdown, "bye");
    CHECK_FALSE(r.conn->is_open());
    CHECK_FALSE(r.conn->send(1, shared({4})));
    r.conn->close(CloseReason::Shutdown, "twice");  // no second on_closed
  });
  REQUIRE(f.wait_for(
      [&] { return f.server_events.n_closed() == 1 && f.client_events.n_closed() == 1; }));
  std::lock_guard lk(f.server_events.mu);
  std::lock_guard lk2(f.client_events.mu);
  CHECK(f.client_events.closed == std::vector<std::string>{"shutdown: bye"});
  CHECK(f.server_events.closed ==
        std::vector<std::string>{TestType::kRemoteClose + std::string("shutdown: bye")});
  // Queued before the close: flushed.
  REQUIRE(f.server_events.msgs.size() == 1);
  CHECK(f.server_events.msgs[0].second == Bytes{1, 2, 3});
}

TEMPLATE_TEST_CASE("transport: a dial to an address nobody listens on fails with a reason", "[net]",
                   MemoryFixture, TcpFixture) {
  TestType f;
  const DialResult r = f.dial(TestType::unreachable());
  CHECK_FALSE(r.conn);
  CHECK_THAT(r.error, Catch::Contains(TestType::kConnectError));
  CHECK(f.client_events.n_conns() == 0);
}

TEMPLATE_TEST_CASE("transport: timers and posts run on the protocol thread and cancel works",
                   "[net]", MemoryFixture, TcpFixture) {
  TestType f;
  Scheduler& s = f.client.scheduler();
  const std::thread::id io = f.on_io([] { return std::this_thread::get_id(); });
  std::atomic<int> fired{0}, cancelled{0};
  std::atomic<bool> timer_on_io{false}, post_on_io{false};
  std::atomic<Millis::rep> waited{0};
  const Millis t0 = s.now();
  f.on_io([&] {
    s.schedule(20ms, [&] {
      timer_on_io = std::this_thread::get_id() == io;
      waited = (s.now() - t0).count();
      ++fired;
    });
    const Scheduler::TimerId id = s.schedule(10ms, [&] { ++cancelled; });
    s.cancel(id);
    s.cancel(id);     // twice: no-op
    s.cancel(12345);  // unknown: no-op
  });
  std::thread poster([&] {
    s.post([&] {
      post_on_io = std::this_thread::get_id() == io;
      ++fired;
    });
  });
  poster.join();
  REQUIRE(f.wait_for([&] { return fired == 2; }));
  CHECK(timer_on_io);
  CHECK(post_on_io);
  CHECK(waited >= 20);
  // A timer scheduled from the protocol thread (as a callback does) fires too.
  f.on_io([&] { s.schedule(1ms, [&] { ++fired; }); });
  REQUIRE(f.wait_for([&] { return fired == 3; }));
  CHECK(cancelled == 0);
}
