// Encoding and checked parsing of the averaging exchange messages (layouts in exchange_messages.hpp).
#include "gossip/exchange_messages.hpp"

#include <cmath>
#include <cstring>
#include <memory>

#include "gossip/le_bytes.hpp"

namespace gossiptrain::gossip {
namespace {

bool valid_wire(std::uint8_t w) { return w <= static_cast<std::uint8_t>(kernels::Wire::Int8); }

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

net::SharedBytes encode_request(const RequestMsg& m) {
  auto b = std::make_shared<net::Bytes>(kRequestBytes);
  std::uint8_t* p = b->data();
  put_u64(p, m.exchange_id);
  put_u64(p + 8, m.fingerprint);
  put_u64(p + 16, m.n_params);
  p[24] = static_cast<std::uint8_t>(m.wire);
  p[25] = m.weighted ? 1 : 0;
  put_u64(p + 26, static_cast<std::uint64_t>(m.samples));
  return b;
}

net::SharedBytes encode_accept(const AcceptMsg& m) {
  auto b = std::make_shared<net::Bytes>(kAcceptBytes);
  put_u64(b->data(), m.exchange_id);
  put_u64(b->data() + 8, static_cast<std::uint64_t>(m.samples));
  return b;
}

net::SharedBytes encode_id(std::uint64_t exchange_id) {
  auto b = std::make_shared<net::Bytes>(kIdBytes);
  put_u64(b->data(), exchange_id);
  return b;
}

net::SharedBytes encode_valid(const ValidMsg& m) {
  if (!(m.tau > 0)) return encode_id(m.exchange_id);
  auto b = std::make_shared<net::Bytes>(kValidClipBytes);
  put_u64(b->data(), m.exchange_id);
  put_f64(b->data() + 8, m.tau);
  put_f64(b->data() + 16, m.norm);
  return b;
}

net::SharedBytes encode_code(std::uint64_t exchange_id, ExchangeCode code) {
  auto b = std::make_shared<net::Bytes>(kCodeBytes);
  put_u64(b->data(), exchange_id);
  (*b)[8] = static_cast<std::uint8_t>(code);
  return b;
}

net::SharedBytes encode_chunk(std::uint64_t exchange_id, std::uint64_t offset,
                              const std::uint8_t* data, std::size_t size) {
  auto b = std::make_shared<net::Bytes>(kChunkHeaderBytes + size);
  write_chunk_header(*b, exchange_id, offset);
  if (size) std::memcpy(b->data() + kChunkHeaderBytes, data, size);
  return b;
}

void write_chunk_header(net::Bytes& msg, std::uint64_t exchange_id, std::uint64_t offset) {
  put_u64(msg.data(), exchange_id);
  put_u64(msg.data() + 8, offset);
}

std::optional<RequestMsg> parse_request(const net::Bytes& b) {
  if (b.size() != kRequestBytes) return std::nullopt;
  const std::uint8_t* p = b.data();
  if (!valid_wire(p[24]) || p[25] > 1) return std::nullopt;
  RequestMsg m;
  m.exchange_id = get_u64(p);
  m.fingerprint = get_u64(p + 8);
  m.n_params = get_u64(p + 16);
  m.wire = static_cast<kernels::Wire>(p[24]);
  m.weighted = p[25] == 1;
  m.samples = static_cast<std::int64_t>(get_u64(p + 26));
  if (m.samples < 0) return std::nullopt;
  return m;
}

std::optional<AcceptMsg> parse_accept(const net::Bytes& b) {
  if (b.size() != kAcceptBytes) return std::nullopt;
  AcceptMsg m{get_u64(b.data()), static_cast<std::int64_t>(get_u64(b.data() + 8))};
  if (m.samples < 0) return std::nullopt;
  return m;
}

std::optional<IdMsg> parse_id(const net::Bytes& b) {
  if (b.size() != kIdBytes) return std::nullopt;
  return IdMsg{get_u64(b.data())};
}

std::optional<ValidMsg> parse_valid(const net::Bytes& b) {
  if (b.size() == kIdBytes) return ValidMsg{get_u64(b.data()), 0.0, 0.0};
  if (b.size() != kValidClipBytes) return std::nullopt;
  ValidMsg m{get_u64(b.data()), get_f64(b.data() + 8), get_f64(b.data() + 16)};
  if (!std::isfinite(m.tau) || !(m.tau > 0) || !std::isfinite(m.norm) || !(m.norm >= 0))
    return std::nullopt;
  return m;
}

std::optional<CodeMsg> parse_code(const net::Bytes& b) {
  if (b.size() != kCodeBytes) return std::nullopt;
  const auto c = static_cast<ExchangeCode>(b[8]);
  if (code_name(c) == "unknown") return std::nullopt;
  return CodeMsg{get_u64(b.data()), c};
}

std::optional<ChunkView> parse_chunk(const net::Bytes& b) {
  if (b.size() <= kChunkHeaderBytes) return std::nullopt;
  ChunkView c;
  c.exchange_id = get_u64(b.data());
  c.offset = get_u64(b.data() + 8);
  c.size = b.size() - kChunkHeaderBytes;
  return c;
}

}  // namespace gossiptrain::gossip
