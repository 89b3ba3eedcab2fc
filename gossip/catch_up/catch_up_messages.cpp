// Encoding and checked decoding of the catch-up messages (layouts in catch_up_messages.hpp).
#include "gossip/catch_up/catch_up_messages.hpp"

#include <iterator>

#include "base/enum_names.hpp"
#include "gossip/message_codec.hpp"

namespace gossiptrain::gossip {

using base::ByteReader;

std::string_view catch_up_code_name(CatchUpCode c) {
  constexpr std::string_view kNames[] = {"fingerprint", "size",     "not-ready", "timeout",
                                         "invalid",     "protocol", "shutdown"};
  static_assert(std::size(kNames) ==
                base::enum_count(CatchUpCode::Fingerprint, CatchUpCode::Shutdown));
  return base::enum_name(c, CatchUpCode::Fingerprint, kNames);
}

net::SharedBytes encode_catch_up_request(const CatchUpRequestMsg& m) {
  return codec::encode_fields(kCatchUpWireVersion, m.id, m.fingerprint, m.n_params);
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
CatchUpRequestMsg decode_catch_up_request(const net::Bytes& b) {
  ByteReader r = codec::reader(b, kCatchUpRequestBytes, kCatchUpWireVersion, "request");
  return CatchUpRequestMsg{r.u64(), r.u64(), r.u64()};
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
