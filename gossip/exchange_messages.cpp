// Encoding and checked decoding of the averaging exchange messages (layouts in
// exchange_messages.hpp), with the shared byte codec.
#include "gossip/exchange_messages.hpp"

#include <cmath>
#include <cstring>
#include <memory>

namespace gossiptrain::gossip {

using base::ByteReader;
using base::ByteWriter;
using base::DecodeError;

namespace {

net::SharedBytes finish(ByteWriter& w) { return std::make_shared<net::Bytes>(w.take()); }

ByteWriter writer(std::size_t bytes) {
  ByteWriter w(bytes);
  w.u8(kExchangeWireVersion);
  return w;
}

// A reader past the version byte of a message that must be exactly `bytes` long.
ByteReader reader(const net::Bytes& b, std::size_t bytes, const char* what) {
  if (b.size() != bytes)
    throw DecodeError(std::string(what) + ": " + std::to_string(b.size()) + " bytes, expected " +
                      std::to_string(bytes));
  ByteReader r(b.data(), b.size());
  if (r.u8() != kExchangeWireVersion) throw DecodeError("unsupported wire version");
  return r;
}

std::int64_t samples(ByteReader& r) {
  const auto v = static_cast<std::int64_t>(r.u64());
  if (v < 0) throw DecodeError("negative sample count");
  return v;
}

}  // namespace

std::string_view code_name(ExchangeCode c) {
  switch (c) {
    case ExchangeCode::Fingerprint: return "fingerprint";
    case ExchangeCode::Size: return "size";
    case ExchangeCode::Wire: return "wire";
    case ExchangeCode::Weighting: return "weighting";
    case ExchangeCode::Timeout: return "timeout";
    case ExchangeCode::Invalid: return "invalid";
    case ExchangeCode::Protocol: return "protocol";
    case ExchangeCode::Shutdown: return "shutdown";
    case ExchangeCode::Anomalous: return "anomalous";
    case ExchangeCode::Banned: return "banned";
  }
  return "unknown";
}

std::string_view exchange_type_name(std::uint8_t type) {
  switch (static_cast<ExchangeType>(type)) {
    case ExchangeType::Request: return "request";
    case ExchangeType::Accept: return "accept";
    case ExchangeType::Busy: return "busy";
    case ExchangeType::Refuse: return "refuse";
    case ExchangeType::Chunk: return "chunk";
    case ExchangeType::Valid: return "valid";
    case ExchangeType::Abort: return "abort";
  }
  return "unknown";
}

net::SharedBytes encode_request(const RequestMsg& m) {
  ByteWriter w = writer(kRequestBytes);
  w.u64(m.exchange_id);
  w.u64(m.fingerprint);
  w.u64(m.n_params);
  w.u8(static_cast<std::uint8_t>(m.wire));
  w.u8(m.weighted ? 1 : 0);
  w.u64(static_cast<std::uint64_t>(m.samples));
  return finish(w);
}

net::SharedBytes encode_accept(const AcceptMsg& m) {
  ByteWriter w = writer(kAcceptBytes);
  w.u64(m.exchange_id);
  w.u64(static_cast<std::uint64_t>(m.samples));
  return finish(w);
}

net::SharedBytes encode_id(std::uint64_t exchange_id) {
  ByteWriter w = writer(kIdBytes);
  w.u64(exchange_id);
  return finish(w);
}

net::SharedBytes encode_valid(const ValidMsg& m) {
  if (!(m.tau > 0)) return encode_id(m.exchange_id);
  ByteWriter w = writer(kValidClipBytes);
  w.u64(m.exchange_id);
  w.f64(m.tau);
  w.f64(m.norm);
  return finish(w);
}

net::SharedBytes encode_code(std::uint64_t exchange_id, ExchangeCode code) {
  ByteWriter w = writer(kCodeBytes);
  w.u64(exchange_id);
  w.u8(static_cast<std::uint8_t>(code));
  return finish(w);
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
  ByteReader r = reader(b, kRequestBytes, "request");
  RequestMsg m;
  m.exchange_id = r.u64();
  m.fingerprint = r.u64();
  m.n_params = r.u64();
  const std::uint8_t wire = r.u8();
  if (wire > static_cast<std::uint8_t>(kernels::Wire::Int8)) throw DecodeError("unknown wire");
  m.wire = static_cast<kernels::Wire>(wire);
  const std::uint8_t weighted = r.u8();
  if (weighted > 1) throw DecodeError("weighted is not a bool");
  m.weighted = weighted == 1;
  m.samples = samples(r);
  r.end();
  return m;
}

AcceptMsg decode_accept(const net::Bytes& b) {
  ByteReader r = reader(b, kAcceptBytes, "accept");
  AcceptMsg m;
  m.exchange_id = r.u64();
  m.samples = samples(r);
  r.end();
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
  ByteReader r = reader(b, kCodeBytes, "code");
  CodeMsg m;
  m.exchange_id = r.u64();
  m.code = static_cast<ExchangeCode>(r.u8());
  if (code_name(m.code) == "unknown") throw DecodeError("unknown code");
  return m;
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
