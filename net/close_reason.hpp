// Why a connection closed, as a typed reason (after i2pd's NTCP2 termination reasons). Its stable
// name leads every close reason's text: "malformed: bad member addr", "timeout: idle for 30 s".
// Logs, TransportHandler::on_closed, the Close frame and the transport's counters carry it, so
// close_reason_of() recovers the type from any of them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

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
// The reason whose name leads text (before ": " or the whole text); Unspecified for none.
CloseReason close_reason_of(std::string_view text);

// Closed connections by reason (TcpTransport's statistics).
using CloseCounts = std::array<std::uint64_t, kCloseReasonCount>;

}  // namespace gossiptrain::net
