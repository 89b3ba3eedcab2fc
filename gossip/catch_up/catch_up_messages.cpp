// Encoding and checked decoding of the catch-up messages (layouts in catch_up_messages.hpp).
#include "gossip/catch_up/catch_up_messages.hpp"

#include <iterator>

#include "base/enum_names.hpp"
#include "gossip/message_codec.hpp"

namespace gossiptrain::gossip {

using base::ByteReader;

std::string_view catch_up_code_name(CatchUpCode c) {
  constexpr std::string_view kNames[] = {"fingerprint", "size",     "not-ready", "timeout",
                                         "invalid",     "protocol", "shutdown",  "fresh"};
  static_assert(std::size(kNames) ==
                base::enum_count(CatchUpCode::Fingerprint, CatchUpCode::Fresh));
  return base::enum_name(c, CatchUpCode::Fingerprint, kNames);
}

net::SharedBytes encode_catch_up_request(const CatchUpRequestMsg& m) {
  // Without the flag, the first layout: servers built before the flag serve it.
  if (!m.resumed_only)
    return codec::encode_fields(kCatchUpWireVersion, m.id, m.fingerprint, m.n_params);
  return codec::encode_fields(kCatchUpWireVersion, m.id, m.fingerprint, m.n_params,
                              std::uint8_t{1});
}

net::SharedBytes encode_catch_up_header(const CatchUpHeaderMsg& m) {
  return codec::encode_fields(
      kCatchUpWireVersion, m.id, m.total_bytes, m.fingerprint, static_cast<std::uint64_t>(m.step),
      static_cast<std::uint64_t>(m.epoch), static_cast<std::uint64_t>(m.samples));
}

net::SharedBytes encode_catch_up_end(const CatchUpEndMsg& m) {
  return codec::encode_fields(kCatchUpWireVersion, m.id, m.crc32);
}

net::SharedBytes encode_catch_up_code(std::uint64_t id, CatchUpCode code) {
  return codec::encode_id_code(kCatchUpWireVersion, id, code);
}

// The fields are read in order: a braced list evaluates its elements left to right.
// Either layout: 25 bytes (no flags), or 26 with a flags byte whose only defined bit is bit 0.
CatchUpRequestMsg decode_catch_up_request(const net::Bytes& b) {
  const bool flags = b.size() == kCatchUpRequestFlagsBytes;
  ByteReader r = codec::reader(b, flags ? kCatchUpRequestFlagsBytes : kCatchUpRequestBytes,
                               kCatchUpWireVersion, "request");
  CatchUpRequestMsg m{r.u64(), r.u64(), r.u64()};
  if (flags) {
    const std::uint8_t f = r.u8();
    if (f & ~std::uint8_t{1}) throw base::DecodeError("request: unknown flags");
    m.resumed_only = (f & 1) != 0;
  }
  return m;
}

CatchUpHeaderMsg decode_catch_up_header(const net::Bytes& b) {
  ByteReader r = codec::reader(b, kCatchUpHeaderBytes, kCatchUpWireVersion, "header");
  return CatchUpHeaderMsg{r.u64(),
                          r.u64(),
                          r.u64(),
                          codec::counter(r, "step"),
                          codec::counter(r, "epoch"),
                          codec::counter(r, "sample count")};
}

CatchUpEndMsg decode_catch_up_end(const net::Bytes& b) {
  ByteReader r = codec::reader(b, kCatchUpEndBytes, kCatchUpWireVersion, "end");
  return CatchUpEndMsg{r.u64(), r.u32()};
}

CatchUpCodeMsg decode_catch_up_code(const net::Bytes& b) {
  return codec::decode_id_code<CatchUpCodeMsg>(b, kCatchUpWireVersion, catch_up_code_name);
}

}  // namespace gossiptrain::gossip
