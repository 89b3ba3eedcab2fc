// Wire format of the transport's own messages (types 0xF0-0xF3, below every protocol's range; they
// never reach the TransportHandler): dial-backs, which let a peer that cannot be dialled (behind a
// NAT or firewall) still take full part, and the reachability self-check (docs/nat.md).
//
// Each message: a version byte, then fixed fields; decoders check the exact size (or the bound of
// the one string) and the version, and throw base::DecodeError otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/bytes.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

enum class DialBackType : std::uint8_t {
  // A -> B: "dial me back at the address I advertised in my handshake" (never any other address).
  Request = 0xF0,
  // B -> A, on the connection of the request: how the dial-back ended (a check's answer, or why a
  // reverse connection will not come).
  Result = 0xF1,
  // B -> A, the first message on a reverse connection B dialled: which request it answers.
  Hello = 0xF2,
  // Either way, once known: whether the sender can be dialled at the address it advertises.
  Reachability = 0xF3,
};
inline constexpr std::uint8_t kDialBackTypeFirst = 0xF0;
inline constexpr std::uint8_t kDialBackTypeLast = 0xF3;
inline constexpr std::uint8_t kDialBackVersion = 1;
inline constexpr std::size_t kMaxDialBackReasonBytes = 120;

enum class DialBackPurpose : std::uint8_t {
  Reverse = 0,  // the requester wants a connection to us and cannot dial us: keep it open
  Check = 1,    // the requester's reachability self-check: dial, answer with a Result, close
};

struct DialBackRequest {
  DialBackPurpose purpose = DialBackPurpose::Reverse;
  std::uint64_t nonce = 0;
};
struct DialBackResult {
  std::uint64_t nonce = 0;
  bool ok = false;
  std::string reason;  // <= kMaxDialBackReasonBytes; empty when ok
};
struct DialBackHello {
  std::uint64_t nonce = 0;
};
struct ReachabilityMsg {
  bool dialable = false;
};

std::string_view dial_back_type_name(std::uint8_t type);

Bytes encode(const DialBackRequest& m);
Bytes encode(const DialBackResult& m);  // a longer reason is cut to the bound
Bytes encode(const DialBackHello& m);
Bytes encode(const ReachabilityMsg& m);
DialBackRequest decode_dial_back_request(const Bytes& b);
DialBackResult decode_dial_back_result(const Bytes& b);
DialBackHello decode_dial_back_hello(const Bytes& b);
ReachabilityMsg decode_reachability(const Bytes& b);

}  // namespace gossiptrain::net
