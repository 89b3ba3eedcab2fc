// Encoders and validating decoders of the dial-back messages (dial_back_messages.hpp).
#include "net/nat/dial_back_messages.hpp"

#include <cstring>

namespace gossiptrain::net {
namespace {

base::ByteReader reader(const Bytes& b, std::size_t min, std::size_t max, const char* what) {
  if (b.size() < min || b.size() > max)
    throw base::DecodeError(std::string(what) + ": " + std::to_string(b.size()) +
                            " bytes, expected " + std::to_string(min) +
                            (max != min ? ".." + std::to_string(max) : std::string()));
  base::ByteReader r(b.data(), b.size());
  if (r.u8() != kDialBackVersion) throw base::DecodeError("unsupported dial-back version");
  return r;
}

bool flag(base::ByteReader& r) {
  const std::uint8_t v = r.u8();
  if (v > 1) throw base::DecodeError("flag not 0 or 1");
  return v == 1;
}

}  // namespace

std::string_view dial_back_type_name(std::uint8_t type) {
  switch (static_cast<DialBackType>(type)) {
    case DialBackType::Request: return "dial-back request";
    case DialBackType::Result: return "dial-back result";
    case DialBackType::Hello: return "dial-back hello";
    case DialBackType::Reachability: return "reachability";
    case DialBackType::RelayAsk: return "relay request";
    case DialBackType::RelayDial: return "relay dial";
  }
  return "unknown transport message";
}

Bytes encode(const DialBackRequest& m) {
  base::ByteWriter w(10);
  w.u8(kDialBackVersion);
  w.u8(static_cast<std::uint8_t>(m.purpose));
  w.u64(m.nonce);
  return w.take();
}

Bytes encode(const DialBackResult& m) {
  base::ByteWriter w(12 + m.reason.size());
  w.u8(kDialBackVersion);
  w.u64(m.nonce);
  w.u8(m.ok ? 1 : 0);
  w.str8(std::string_view(m.reason).substr(0, kMaxDialBackReasonBytes), kMaxDialBackReasonBytes);
  return w.take();
}

Bytes encode(const DialBackHello& m) {
  base::ByteWriter w(9);
  w.u8(kDialBackVersion);
  w.u64(m.nonce);
  return w.take();
}

Bytes encode(const ReachabilityMsg& m) {
  base::ByteWriter w(2);
  w.u8(kDialBackVersion);
  w.u8(m.dialable ? 1 : 0);
  return w.take();
}

DialBackRequest decode_dial_back_request(const Bytes& b) {
  auto r = reader(b, 10, 10, "dial-back request");
  DialBackRequest m;
  const std::uint8_t p = r.u8();
  if (p > 1) throw base::DecodeError("unknown dial-back purpose");
  m.purpose = static_cast<DialBackPurpose>(p);
  m.nonce = r.u64();
  r.end();
  return m;
}

DialBackResult decode_dial_back_result(const Bytes& b) {
  auto r = reader(b, 11, 11 + kMaxDialBackReasonBytes, "dial-back result");
  DialBackResult m;
  m.nonce = r.u64();
  m.ok = flag(r);
  m.reason = r.str8(kMaxDialBackReasonBytes, "dial-back reason");
  for (char c : m.reason)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
      throw base::DecodeError("dial-back reason: not printable ASCII");
  r.end();
  return m;
}

DialBackHello decode_dial_back_hello(const Bytes& b) {
  auto r = reader(b, 9, 9, "dial-back hello");
  DialBackHello m;
  m.nonce = r.u64();
  r.end();
  return m;
}

ReachabilityMsg decode_reachability(const Bytes& b) {
  auto r = reader(b, 2, 2, "reachability");
  ReachabilityMsg m;
  m.dialable = flag(r);
  r.end();
  return m;
}

Bytes encode(const RelayAsk& m) {
  base::ByteWriter w(10 + m.target.size());
  w.u8(kDialBackVersion);
  w.u64(m.nonce);
  w.str8(m.target, kMaxAddrBytes);
  return w.take();
}

Bytes encode(const RelayDial& m) {
  base::ByteWriter w(9);
  w.u8(kDialBackVersion);
  w.u64(m.nonce);
  return w.take();
}

RelayAsk decode_relay_ask(const Bytes& b) {
  auto r = reader(b, 10, 10 + kMaxAddrBytes, "relay request");
  RelayAsk m;
  m.nonce = r.u64();
  m.target = r.str8(kMaxAddrBytes, "relay target");
  if (m.target.empty()) throw base::DecodeError("relay target: empty");
  for (char c : m.target)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) > 0x7e)
      throw base::DecodeError("relay target: not printable ASCII");
  r.end();
  return m;
}

RelayDial decode_relay_dial(const Bytes& b) {
  auto r = reader(b, 9, 9, "relay dial");
  RelayDial m;
  m.nonce = r.u64();
  r.end();
  return m;
}

Bytes relay_preamble(std::uint64_t nonce, std::uint8_t side) {
  base::ByteWriter w(kRelayPreambleBytes);
  w.bytes(kRelayMagic, 4);
  w.u64(nonce);
  w.u8(side);
  return w.take();
}

bool parse_relay_preamble(const std::uint8_t* p, std::uint64_t& nonce, std::uint8_t& side) {
  if (std::memcmp(p, kRelayMagic, 4) != 0) return false;
  base::ByteReader r(p + 4, kRelayPreambleBytes - 4);
  nonce = r.u64();
  side = r.u8();
  return side <= 1;
}

}  // namespace gossiptrain::net
