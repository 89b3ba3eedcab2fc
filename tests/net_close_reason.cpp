// Typed close reasons (net/close_reason.hpp): every name maps back to its reason, and a typed close
// reaches both ends of a connection with the reason's name first.
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
  void on_closed(const ConnectionPtr&, const std::string& reason) override {
    reasons.push_back(reason);
  }
  std::vector<ConnectionPtr> conns;
  std::vector<std::string> reasons;
};

}  // namespace

TEST_CASE("close reasons: every reason has a distinct name that maps back to it", "[net]") {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < kCloseReasonCount; ++i) {
    const auto r = static_cast<CloseReason>(i);
    const std::string name(close_reason_name(r));
    INFO(name);
    CHECK(name != "unknown");
    CHECK(close_reason_of(name) == r);
    CHECK(close_reason_of(close_text(r, "some detail: with a colon")) == r);
    CHECK(std::find(names.begin(), names.end(), name) == names.end());
    names.push_back(name);
  }
  CHECK(close_text(CloseReason::NoAnswer) == "no_answer");
  CHECK(close_text(CloseReason::Malformed, "bad addr") == "malformed: bad addr");
  CHECK(close_reason_of("free text without a reason") == CloseReason::Unspecified);
  CHECK(close_reason_of("") == CloseReason::Unspecified);
  CHECK(close_reason_name(static_cast<CloseReason>(200)) == "unknown");
}

TEST_CASE("close reasons: a typed close reaches both ends with its name first", "[net]") {
  SimNetwork net;
  SimTransport& a = net.add_node("a:1", "A");
  SimTransport& b = net.add_node("b:1", "B");
  Closes ca(a), cb(b);
  ConnectionPtr c;
  a.connect("b:1", [&](ConnectionPtr conn, const std::string&) { c = std::move(conn); });
  net.run_until_idle();
  REQUIRE(c);
  c->close(CloseReason::ProtocolViolation, "exchange: chunk out of order");
  net.run_until_idle();
  REQUIRE(ca.reasons.size() == 1);
  CHECK(ca.reasons[0] == "protocol_violation: exchange: chunk out of order");
  CHECK(close_reason_of(ca.reasons[0]) == CloseReason::ProtocolViolation);
  REQUIRE(cb.reasons.size() == 1);
  CHECK(cb.reasons[0] == "remote_closed: protocol_violation: exchange: chunk out of order");
  CHECK(close_reason_of(cb.reasons[0]) == CloseReason::RemoteClosed);
}
