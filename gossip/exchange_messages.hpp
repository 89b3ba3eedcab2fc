// Wire format of the averaging exchange (message types 0x40-0x5F): fixed little-endian layouts,
// and parsers that check every size before anything is allocated or trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/backend.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Within the range gossip/dispatcher.hpp gives the exchange (kExchangeTypeFirst..Last).
enum class ExchangeType : std::uint8_t {
  Request = 0x40,  // initiator -> responder: asks to average
  Accept = 0x41,   // responder -> initiator: taking part; both start streaming
  Busy = 0x42,     // responder -> initiator: already in an exchange (or not ready yet)
  Refuse = 0x43,   // responder -> initiator: incompatible (fingerprint, size, wire, weighting)
  Chunk = 0x44,    // either way: a slice of the encoded snapshot, in order
  Valid = 0x45,    // either way: "I received and validated all of yours" (the commit vote)
  Abort = 0x46,    // either way: the exchange is off, nothing is applied
};

// Why a responder refuses, or why a side aborts; carried as one byte.
enum class ExchangeCode : std::uint8_t {
  Fingerprint = 1,
  Size = 2,
  Wire = 3,
  Weighting = 4,
  Timeout = 5,
  Invalid = 6,   // payload failed validation (non-finite, norm bound, length)
  Corrupt = 7,   // chunk checksum mismatch
  Protocol = 8,  // unexpected or malformed message
  Shutdown = 9,
};
// Stable lowercase token for logs, metrics reasons and counters; "unknown" for other values.
std::string_view code_name(ExchangeCode c);

struct RequestMsg {
  std::uint64_t exchange_id = 0;
  std::uint64_t fingerprint = 0;
  std::uint64_t n_params = 0;
  kernels::Wire wire = kernels::Wire::Fp32;
  bool weighted = false;      // the initiator mixes with sample-count weights
  std::int64_t samples = 0;   // the initiator's shard size (for weighting)
};
struct AcceptMsg {
  std::uint64_t exchange_id = 0;
  std::int64_t samples = 0;  // the responder's shard size
};
struct IdMsg {  // Busy, Valid
  std::uint64_t exchange_id = 0;
};
struct CodeMsg {  // Refuse, Abort
  std::uint64_t exchange_id = 0;
  ExchangeCode code = ExchangeCode::Protocol;
};
// A chunk's payload bytes stay in the received message; data is a view into it.
struct ChunkView {
  std::uint64_t exchange_id = 0;
  std::uint64_t offset = 0;
  std::uint32_t crc = 0;  // CRC-32 (zlib) of data
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

constexpr std::size_t kRequestBytes = 34;
constexpr std::size_t kAcceptBytes = 16;
constexpr std::size_t kIdBytes = 8;
constexpr std::size_t kCodeBytes = 9;
constexpr std::size_t kChunkHeaderBytes = 20;

net::SharedBytes encode_request(const RequestMsg& m);
net::SharedBytes encode_accept(const AcceptMsg& m);
net::SharedBytes encode_id(std::uint64_t exchange_id);
net::SharedBytes encode_code(std::uint64_t exchange_id, ExchangeCode code);
// Copies data[0, size) into a new chunk message with its header and checksum.
net::SharedBytes encode_chunk(std::uint64_t exchange_id, std::uint64_t offset,
                              const std::uint8_t* data, std::size_t size);

// Parsers: nullopt when the size is not exactly right or a field holds an impossible value.
std::optional<RequestMsg> parse_request(const net::Bytes& b);
std::optional<AcceptMsg> parse_accept(const net::Bytes& b);
std::optional<IdMsg> parse_id(const net::Bytes& b);
std::optional<CodeMsg> parse_code(const net::Bytes& b);
// nullopt when shorter than the header or carrying no data; the checksum is checked by the caller
// (chunk_crc_ok) so a corrupt chunk can be reported as such rather than as malformed.
std::optional<ChunkView> parse_chunk(const net::Bytes& b);
bool chunk_crc_ok(const ChunkView& c);

}  // namespace gossiptrain::gossip
