// Encoding and checked decoding of the averaging exchange messages (layouts in
// exchange_messages.hpp), with the shared byte codec.
#include "gossip/exchange/exchange_messages.hpp"

#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "base/enum_names.hpp"
#include "gossip/message_codec.hpp"

namespace gossiptrain::gossip {

std::uint64_t payload_sample(const std::uint8_t* data, std::uint64_t offset, std::size_t size) {
  constexpr std::uint64_t kStride = 64;
  std::uint64_t h = 0;
  for (std::uint64_t p = (offset + kStride - 1) / kStride * kStride; p + 4 <= offset + size;
       p += kStride) {
    std::uint32_t word;
    std::memcpy(&word, data + (p - offset), 4);
    std::uint64_t z = (std::uint64_t(word) ^ (p << 32)) + 0x9E3779B97F4A7C15ULL;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    h += z ^ (z >> 31);
  }
  return h;
}

using base::ByteReader;
using base::DecodeError;
using codec::counter;
using codec::progress;

namespace {

ByteReader reader(const net::Bytes& b, std::size_t bytes, const char* what) {
  return codec::reader(b, bytes, kExchangeWireVersion, what);
}

}  // namespace

std::string_view code_name(ExchangeCode c) {
  // 7 was a chunk checksum, never shipped.
  constexpr std::string_view kNames[] = {"fingerprint", "size",      "wire",  "weighting",
                                         "timeout",     "invalid",   "",      "protocol",
                                         "shutdown",    "anomalous", "banned",    "range"};
  static_assert(std::size(kNames) ==
                base::enum_count(ExchangeCode::Fingerprint, ExchangeCode::Range));
  return base::enum_name(c, ExchangeCode::Fingerprint, kNames);
}

std::string_view exchange_type_name(std::uint8_t type) {
  constexpr std::string_view kNames[] = {"request", "accept", "busy", "refuse",
                                         "chunk",   "valid",  "abort"};
  static_assert(std::size(kNames) == base::enum_count(ExchangeType::Request, ExchangeType::Abort));
  return base::enum_name(static_cast<ExchangeType>(type), ExchangeType::Request, kNames);
}

net::SharedBytes encode_request(const RequestMsg& m) {
  if (m.round >= 0)
    return codec::encode_fields(
        kExchangeWireVersion, m.exchange_id, m.fingerprint, m.n_params,
        static_cast<std::uint8_t>(m.wire), static_cast<std::uint8_t>(m.weighted ? 1 : 0),
        static_cast<std::uint64_t>(m.samples), m.progress, static_cast<std::uint64_t>(m.step),
        static_cast<std::uint64_t>(m.round), m.view);
  return codec::encode_fields(
      kExchangeWireVersion, m.exchange_id, m.fingerprint, m.n_params,
      static_cast<std::uint8_t>(m.wire), static_cast<std::uint8_t>(m.weighted ? 1 : 0),
      static_cast<std::uint64_t>(m.samples), m.progress, static_cast<std::uint64_t>(m.step));
}

net::SharedBytes encode_accept(const AcceptMsg& m) {
  if (m.round >= 0)
    return codec::encode_fields(kExchangeWireVersion, m.exchange_id,
                                static_cast<std::uint64_t>(m.samples), m.progress,
                                static_cast<std::uint64_t>(m.step),
                                (static_cast<std::uint64_t>(m.round) << 1) | (m.scheduled ? 1u : 0u));
  return codec::encode_fields(kExchangeWireVersion, m.exchange_id,
                              static_cast<std::uint64_t>(m.samples), m.progress,
                              static_cast<std::uint64_t>(m.step));
}

net::SharedBytes encode_id(std::uint64_t exchange_id) {
  return codec::encode_fields(kExchangeWireVersion, exchange_id);
}

net::SharedBytes encode_valid(const ValidMsg& m) {
  if (!(m.tau > 0)) return encode_id(m.exchange_id);
  return codec::encode_fields(kExchangeWireVersion, m.exchange_id, m.tau, m.norm);
}

net::SharedBytes encode_code(std::uint64_t exchange_id, ExchangeCode code) {
  return codec::encode_id_code(kExchangeWireVersion, exchange_id, code);
}

net::SharedBytes encode_chunk(std::uint64_t exchange_id, std::uint64_t offset,
                              const std::uint8_t* data, std::size_t size) {
  auto b = std::make_shared<net::Bytes>(kChunkHeaderBytes + size);
  write_chunk_header(*b, exchange_id, offset);
  if (size) std::memcpy(b->data() + kChunkHeaderBytes, data, size);
  return b;
}

void write_chunk_header(net::Bytes& msg, std::uint64_t exchange_id, std::uint64_t offset) {
  std::memset(msg.data(), 0, 8);
  msg[0] = kExchangeWireVersion;
  base::put_u64(msg.data() + 8, exchange_id);
  base::put_u64(msg.data() + 16, offset);
}

RequestMsg decode_request(const net::Bytes& b) {
  ByteReader r =
      reader(b, b.size() == kScheduleRequestBytes ? kScheduleRequestBytes : kRequestBytes, "request");
  RequestMsg m;
  m.exchange_id = r.u64();
  m.fingerprint = r.u64();
  m.n_params = r.u64();
  const std::uint8_t wire = r.u8();
  if (wire > static_cast<std::uint8_t>(WireFormat::Int4Rel)) throw DecodeError("unknown wire");
  m.wire = static_cast<WireFormat>(wire);
  const std::uint8_t weighted = r.u8();
  if (weighted > 1) throw DecodeError("weighted is not a bool");
  m.weighted = weighted == 1;
  m.samples = counter(r, "sample count");
  m.progress = progress(r);
  m.step = counter(r, "step");
  if (r.remaining() != 0) {
    m.round = counter(r, "round");
    if (m.round >= (std::int64_t(1) << 61)) throw DecodeError("request: round out of range");
    m.view = r.u64();
  }
  r.end();
  return m;
}

AcceptMsg decode_accept(const net::Bytes& b) {
  ByteReader r =
      reader(b, b.size() == kScheduleAcceptBytes ? kScheduleAcceptBytes : kAcceptBytes, "accept");
  AcceptMsg m;
  m.exchange_id = r.u64();
  m.samples = counter(r, "sample count");
  m.progress = progress(r);
  m.step = counter(r, "step");
  if (r.remaining() != 0) {
    const std::uint64_t v = r.u64();
    if (v >> 62) throw DecodeError("accept: round out of range");
    m.round = static_cast<std::int64_t>(v >> 1);
    m.scheduled = (v & 1) != 0;
  }
  return m;
}

IdMsg decode_id(const net::Bytes& b) {
  ByteReader r = reader(b, kIdBytes, "id");
  return IdMsg{r.u64()};
}

ValidMsg decode_valid(const net::Bytes& b) {
  ByteReader r = reader(b, b.size() == kIdBytes ? kIdBytes : kValidClipBytes, "valid");
  ValidMsg m;
  m.exchange_id = r.u64();
  if (r.remaining() == 0) return m;
  m.tau = r.f64();
  m.norm = r.f64();
  if (!std::isfinite(m.tau) || !(m.tau > 0) || !std::isfinite(m.norm) || !(m.norm >= 0))
    throw DecodeError("valid: tau or norm out of range");
  return m;
}

CodeMsg decode_code(const net::Bytes& b) {
  return codec::decode_id_code<CodeMsg>(b, kExchangeWireVersion, code_name);
}

ChunkView decode_chunk(const net::Bytes& b) {
  if (b.size() <= kChunkHeaderBytes) throw DecodeError("chunk without data");
  ByteReader r(b.data(), kChunkHeaderBytes);
  if (r.u8() != kExchangeWireVersion) throw DecodeError("unsupported wire version");
  const std::uint8_t* reserved = r.bytes(7);
  for (int i = 0; i < 7; ++i)
    if (reserved[i] != 0) throw DecodeError("chunk: reserved bytes not zero");
  ChunkView c;
  c.exchange_id = r.u64();
  c.offset = r.u64();
  c.size = b.size() - kChunkHeaderBytes;
  return c;
}

}  // namespace gossiptrain::gossip
