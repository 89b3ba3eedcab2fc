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

#include "base/bytes.hpp"
#include "net/secure/limits.hpp"
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
  // A -> relay R: "open a relayed connection to the peer advertising this address" (R answers
  // with a Result; on ok, A opens a raw TCP connection to R with the relay preamble).
  RelayAsk = 0xF4,
  // R -> the target B, on B's connection to R: "open a raw TCP connection to me with this nonce";
  // A and B then run an ordinary channel (handshake, frames) through R's splice.
  RelayDial = 0xF5,
};
inline constexpr std::uint8_t kDialBackTypeFirst = 0xF0;
inline constexpr std::uint8_t kDialBackTypeLast = 0xF5;
// The first bytes on a raw TCP connection to a relay: magic, nonce, side (0: the asker, 1: the
// target). A handshake starts with another magic ("GTH2", Handshake::kMagic), so the two are told
// apart.
inline constexpr std::uint8_t kRelayMagic[4] = {'G', 'T', 'R', '1'};
inline constexpr std::size_t kRelayPreambleBytes = 4 + 8 + 1;
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
struct RelayAsk {
  std::uint64_t nonce = 0;
  std::string target;  // the target's advertised address, <= kMaxAddrBytes
};
struct RelayDial {
  std::uint64_t nonce = 0;
};

std::string_view dial_back_type_name(std::uint8_t type);

Bytes encode(const DialBackRequest& m);
Bytes encode(const DialBackResult& m);  // a longer reason is cut to the bound
Bytes encode(const DialBackHello& m);
Bytes encode(const ReachabilityMsg& m);
Bytes encode(const RelayAsk& m);
Bytes encode(const RelayDial& m);
DialBackRequest decode_dial_back_request(const Bytes& b);
DialBackResult decode_dial_back_result(const Bytes& b);
DialBackHello decode_dial_back_hello(const Bytes& b);
ReachabilityMsg decode_reachability(const Bytes& b);
RelayAsk decode_relay_ask(const Bytes& b);
RelayDial decode_relay_dial(const Bytes& b);
// The preamble of a raw connection to a relay; false when the bytes are not one.
Bytes relay_preamble(std::uint64_t nonce, std::uint8_t side);
bool parse_relay_preamble(const std::uint8_t* p, std::uint64_t& nonce, std::uint8_t& side);

}  // namespace gossiptrain::net
