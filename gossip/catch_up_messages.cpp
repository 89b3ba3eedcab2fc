// Encoding and checked parsing of the catch-up messages (layouts in catch_up_messages.hpp).
#include "gossip/catch_up_messages.hpp"

#include <memory>

#include "core/checkpoint.hpp"
#include "gossip/le_bytes.hpp"

namespace gossiptrain::gossip {

std::string_view catch_up_code_name(CatchUpCode c) {
  switch (c) {
    case CatchUpCode::Fingerprint: return "fingerprint";
    case CatchUpCode::Size: return "size";
    case CatchUpCode::NotReady: return "not-ready";
    case CatchUpCode::Timeout: return "timeout";
    case CatchUpCode::Invalid: return "invalid";
    case CatchUpCode::Protocol: return "protocol";
    case CatchUpCode::Shutdown: return "shutdown";
  }
  return "unknown";
}

net::SharedBytes encode_catch_up_request(const CatchUpRequestMsg& m) {
  auto b = std::make_shared<net::Bytes>(kCatchUpRequestBytes);
  put_u64(b->data(), m.id);
  put_u64(b->data() + 8, m.fingerprint);
  put_u64(b->data() + 16, m.n_params);
  return b;
}

net::SharedBytes encode_catch_up_header(const CatchUpHeaderMsg& m) {
  auto b = std::make_shared<net::Bytes>(kCatchUpHeaderBytes);
  std::uint8_t* p = b->data();
  put_u64(p, m.id);
  put_u64(p + 8, m.total_bytes);
  put_u64(p + 16, m.fingerprint);
  put_u64(p + 24, static_cast<std::uint64_t>(m.step));
  put_u64(p + 32, static_cast<std::uint64_t>(m.epoch));
  put_u64(p + 40, static_cast<std::uint64_t>(m.samples));
  return b;
}

net::SharedBytes encode_catch_up_end(const CatchUpEndMsg& m) {
  auto b = std::make_shared<net::Bytes>(kCatchUpEndBytes);
  put_u64(b->data(), m.id);
  for (int i = 0; i < 4; ++i) (*b)[8 + i] = static_cast<std::uint8_t>(m.crc32 >> (8 * i));
  return b;
}

net::SharedBytes encode_catch_up_code(std::uint64_t id, CatchUpCode code) {
  auto b = std::make_shared<net::Bytes>(kCatchUpCodeBytes);
  put_u64(b->data(), id);
  (*b)[8] = static_cast<std::uint8_t>(code);
  return b;
}

std::optional<CatchUpRequestMsg> parse_catch_up_request(const net::Bytes& b) {
  if (b.size() != kCatchUpRequestBytes) return std::nullopt;
  return CatchUpRequestMsg{get_u64(b.data()), get_u64(b.data() + 8), get_u64(b.data() + 16)};
}

std::optional<CatchUpHeaderMsg> parse_catch_up_header(const net::Bytes& b) {
  if (b.size() != kCatchUpHeaderBytes) return std::nullopt;
  const std::uint8_t* p = b.data();
  CatchUpHeaderMsg m;
  m.id = get_u64(p);
  m.total_bytes = get_u64(p + 8);
  m.fingerprint = get_u64(p + 16);
  m.step = static_cast<std::int64_t>(get_u64(p + 24));
  m.epoch = static_cast<std::int64_t>(get_u64(p + 32));
  m.samples = static_cast<std::int64_t>(get_u64(p + 40));
  if (m.step < 0 || m.epoch < 0 || m.samples < 0) return std::nullopt;
  return m;
}

std::optional<CatchUpEndMsg> parse_catch_up_end(const net::Bytes& b) {
  if (b.size() != kCatchUpEndBytes) return std::nullopt;
  std::uint32_t crc = 0;
  for (int i = 0; i < 4; ++i) crc |= static_cast<std::uint32_t>(b[8 + i]) << (8 * i);
  return CatchUpEndMsg{get_u64(b.data()), crc};
}

std::optional<CatchUpCodeMsg> parse_catch_up_code(const net::Bytes& b) {
  if (b.size() != kCatchUpCodeBytes) return std::nullopt;
  const auto c = static_cast<CatchUpCode>(b[8]);
  if (catch_up_code_name(c) == "unknown") return std::nullopt;
  return CatchUpCodeMsg{get_u64(b.data()), c};
}

}  // namespace gossiptrain::gossip
