// Why a connection closed, as a typed reason (after i2pd's NTCP2 termination reasons), carried
// typed inside the process (CloseCause: TransportHandler::on_closed, the connect callback, the
// channel, the transport's counters). Its stable name leads the text written to logs and sent in
// the Close frame: "malformed: bad member addr", "timeout: idle for 30 s".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include <spdlog/fmt/fmt.h>

namespace gossiptrain::net {

enum class CloseReason : std::uint8_t {
  Unspecified = 0,    // free text without a typed reason
  Shutdown,           // this side stops, leaves, or is done
  NotNeeded,          // no more use for the connection (idle, superseded)
  Self,               // connected to ourselves
  UnexpectedPeer,     // the remote is not the peer this connection was for
  Malformed,          // a message that does not decode
  UnknownType,        // a message type no protocol takes
  ProtocolViolation,  // a well-formed message out of turn, or a broken rule of the protocol
  NoAnswer,           // a request was not answered in time
  Cancelled,          // the other side gave the operation up
  Failed,             // the operation on this connection failed (exchange, catch-up, round)
  Refused,            // a connection this side's role does not take
  HandshakeFailed,    // the handshake did not complete (key, version, fingerprint, allowlist)
  Timeout,            // a deadline of the channel passed (handshake, idle, close linger)
  IoError,            // the socket failed (reset, write error)
  RemoteClosed,       // the remote closed, with its own reason after ours
  Truncated,          // EOF inside a frame or a message
  FrameError,         // a frame that fails its checks or its authentication
  SharedIdentity,     // the remote proved it holds our identity key: another process uses it
};
inline constexpr std::size_t kCloseReasonCount = 19;

// Stable lowercase name ("protocol_violation"); "unspecified" for Unspecified.
std::string_view close_reason_name(CloseReason r);
// "NAME: detail", or "NAME" without a detail.
std::string close_text(CloseReason r, std::string_view detail = {});

// A close reason with its detail, as the process hands it around. text() ("NAME: detail", or the
// detail alone for Unspecified, which free text such as a failed dial's error is) only where it is
// logged, written or sent.
struct CloseCause {
  CloseReason reason = CloseReason::Unspecified;
  std::string detail;
  // The connection ended before its handshake completed (a read or write error or the remote
  // closing it then; a timeout has reason Timeout): a seed that takes no one, say, refuses so.
  bool in_handshake = false;

  std::string text() const {
    if (reason == CloseReason::Unspecified && !detail.empty()) return detail;
    return close_text(reason, detail);
  }
  bool operator==(const CloseCause&) const = default;
};

// Closed connections by reason (TcpTransport's statistics).
using CloseCounts = std::array<std::uint64_t, kCloseReasonCount>;

}  // namespace gossiptrain::net

// Log lines print a cause as its text().
template <>
struct fmt::formatter<gossiptrain::net::CloseCause> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const gossiptrain::net::CloseCause& c, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(c.text(), ctx);
  }
};
