// The pieces that the exchange's and catch-up's fixed-layout messages share (exchange_messages,
// catch_up_messages): a version byte, then fixed little-endian fields (base/bytes.hpp), and
// a decoder that checks the exact size and the version before reading a field. Membership's
// messages (variable length) read their progress word with progress() and counter() too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/bytes.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip::codec {

// One field on the wire: u8, u32, u64 or f64 by its type (no other, no silent conversion).
template <class T>
void put(base::ByteWriter& w, T v) {
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    w.u8(v);
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
    w.u32(v);
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    w.u64(v);
  } else {
    static_assert(std::is_same_v<T, double>, "a wire field is u8, u32, u64 or f64");
    w.f64(v);
  }
}

// The message: the version byte, then the fields in order.
template <class... Field>
net::SharedBytes encode_fields(std::uint8_t version, Field... fields) {
  base::ByteWriter w(1 + (sizeof(Field) + ...));
  w.u8(version);
  (put(w, fields), ...);
  return std::make_shared<net::Bytes>(w.take());
}

// A reader past the version byte of a message that must be exactly `bytes` long.
inline base::ByteReader reader(const net::Bytes& b, std::size_t bytes, std::uint8_t version,
                               const char* what) {
  if (b.size() != bytes)
    throw base::DecodeError(std::string(what) + ": " + std::to_string(b.size()) +
                            " bytes, expected " + std::to_string(bytes));
  base::ByteReader r(b.data(), b.size());
  if (r.u8() != version) throw base::DecodeError("unsupported wire version");
  return r;
}

// A fraction of training done (an exchange's REQUEST and ACCEPT, membership's progress word):
// -1 (not known) or in [0, 1].
inline bool valid_progress(double p) { return p == -1.0 || (p >= 0.0 && p <= 1.0); }
inline double progress(base::ByteReader& r) {
  const double p = r.f64();
  if (!valid_progress(p)) throw base::DecodeError("progress out of range");
  return p;
}

// A signed counter (a step, a sample count) sent as u64: negative is refused.
inline std::int64_t counter(base::ByteReader& r, const char* what) {
  const auto v = static_cast<std::int64_t>(r.u64());
  if (v < 0) throw base::DecodeError(std::string("negative ") + what);
  return v;
}

// Refuse and Abort (and catch-up's CancelFetch): an id and a one-byte code, 10 bytes.
inline constexpr std::size_t kIdCodeBytes = 10;

template <class Code>
net::SharedBytes encode_id_code(std::uint8_t version, std::uint64_t id, Code code) {
  return encode_fields(version, id, static_cast<std::uint8_t>(code));
}

// Msg is {id, code}; a code that `name` calls "unknown" is refused.
template <class Msg, class Code>
Msg decode_id_code(const net::Bytes& b, std::uint8_t version, std::string_view (*name)(Code)) {
  base::ByteReader r = reader(b, kIdCodeBytes, version, "code");
  const std::uint64_t id = r.u64();
  const auto code = static_cast<Code>(r.u8());
  if (name(code) == "unknown") throw base::DecodeError("unknown code");
  return Msg{id, code};
}

}  // namespace gossiptrain::gossip::codec
