// Typed close reasons (net/close_reason.hpp): every reason has its own name, a typed close reaches
// both ends of a connection typed (the remote's as the text of the Close frame), and a cause's
// text.
#include <spdlog/fmt/fmt.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "net/close_reason.hpp"
#include "net/memory/memory_transport.hpp"

using namespace gossiptrain::net;

namespace {

struct Closes : TransportHandler {
  explicit Closes(SimTransport& t) { t.set_handler(this); }
  void on_connection(const ConnectionPtr& c, bool) override { conns.push_back(c); }
  void on_message(const ConnectionPtr&, std::uint8_t, Bytes&&) override {}
  void on_closed(const ConnectionPtr&, const CloseCause& cause) override {
    causes.push_back(cause);
  }
  std::vector<ConnectionPtr> conns;
  std::vector<CloseCause> causes;
};

}  // namespace

TEST_CASE("close reasons: every reason has a distinct name", "[net]") {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kCloseReasonCount; ++i) {
    const auto r = static_cast<CloseReason>(i);
    const std::string name(close_reason_name(r));
    INFO(name);
    CHECK(name != "unknown");
    CHECK(close_text(r, "some detail: with a colon") == name + ": some detail: with a colon");
    CHECK(std::find(names.begin(), names.end(), name) == names.end());
    names.push_back(name);
  }
  CHECK(close_text(CloseReason::NoAnswer) == "no_answer");
  CHECK(close_text(CloseReason::Malformed, "bad addr") == "malformed: bad addr");
  CHECK(close_reason_name(static_cast<CloseReason>(200)) == "unknown");
}

TEST_CASE("close reasons: a typed close reaches both ends with its name first", "[net]") {
  SimNetwork net;
  SimTransport& a = net.add_node("a:1", "A");
  SimTransport& b = net.add_node("b:1", "B");
  Closes ca(a), cb(b);
  ConnectionPtr c;
  a.connect("b:1", [&](ConnectionPtr conn, const CloseCause&) { c = std::move(conn); });
  net.run_until_idle();
  REQUIRE(c);
  c->close(CloseReason::ProtocolViolation, "exchange: chunk out of order");
  net.run_until_idle();
  REQUIRE(ca.causes.size() == 1);
  CHECK(ca.causes[0].reason == CloseReason::ProtocolViolation);
  CHECK(ca.causes[0].text() == "protocol_violation: exchange: chunk out of order");
  // The remote's reason comes as its text, the detail of our remote_closed.
  REQUIRE(cb.causes.size() == 1);
  CHECK(cb.causes[0].reason == CloseReason::RemoteClosed);
  CHECK(cb.causes[0].text() == "remote_closed: protocol_violation: exchange: chunk out of order");
}

TEST_CASE("close reasons: a cause's text is its name and detail, free text for unspecified",
          "[net]") {
  CHECK(CloseCause{CloseReason::Timeout, "idle"}.text() == "timeout: idle");
  CHECK(CloseCause{CloseReason::Shutdown}.text() == "shutdown");
  CHECK(CloseCause{CloseReason::Unspecified, "connect timeout"}.text() == "connect timeout");
  CHECK(CloseCause{}.text() == "unspecified");
  CHECK(fmt::format("{}", CloseCause{CloseReason::Malformed, "bad addr"}) == "malformed: bad addr");
}
