// Wire format of the averaging exchange (message types 0x40-0x5F): a version byte, then fixed
// little-endian fields (base/bytes.hpp), and decoders that check every size before anything
// is trusted. Chunks carry no
// checksum: the channel authenticates every frame (AEAD), and a second pass over 100 MB on each
// side would cost more than it could catch.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/bytes.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Within the range gossip/dispatcher.hpp gives the exchange (kExchangeTypeFirst..Last).
enum class ExchangeType : std::uint8_t {
  Request = 0x40,  // initiator -> responder: asks to average
  Accept = 0x41,   // responder -> initiator: taking part; both start streaming
  Busy = 0x42,     // responder -> initiator: already in an exchange (or not ready yet)
  Refuse = 0x43,   // responder -> initiator: incompatible (fingerprint, size, wire, weighting)
  Chunk = 0x44,    // either way: a slice of the encoded snapshot, in order (fp32: whole values)
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
  Protocol = 8,  // unexpected or malformed message (7 was a chunk checksum, never shipped)
  Shutdown = 9,
  Anomalous = 10,  // ||r - s|| far outside the adaptive clipping bound (robust mixing)
  Banned = 11,     // refuse: the requester is banned for a while after repeated refusals
  Range = 12,      // abort: an int4-rel vector did not decode against ours (relative_wire.hpp)
};
// Stable lowercase token for logs, metrics reasons and counters; "unknown" for other values.
std::string_view code_name(ExchangeCode c);

struct RequestMsg {
  std::uint64_t exchange_id = 0;
  std::uint64_t fingerprint = 0;
  std::uint64_t n_params = 0;
  WireFormat wire = WireFormat::Fp32;
  bool weighted = false;     // the initiator mixes with sample-count weights
  std::int64_t samples = 0;  // the initiator's shard size (for weighting)
  double progress = -1;      // fraction of its training done, in [0, 1]; -1: not known
  // Optimizer steps it has done: robust mixing compares progress in steps, which runs of
  // different lengths share where the fraction does not (robust_bound.hpp, "progress gap").
  std::int64_t step = 0;
  // --partner-choice hypercube (partner_schedule.hpp): the schedule round the initiator asks for
  // (-1: none, a plain exchange) and the hash of the member list its schedule comes from. Sent as
  // 16 more bytes only when round >= 0.
  std::int64_t round = -1;
  std::uint64_t view = 0;
};
struct AcceptMsg {
  std::uint64_t exchange_id = 0;
  std::int64_t samples = 0;  // the responder's shard size
  double progress = -1;      // as RequestMsg's
  std::int64_t step = 0;     // as RequestMsg's
  // The responder's own schedule round (-1: not on a schedule) and whether this exchange is the
  // scheduled one of the request's round (both sides weight it by the schedule). 8 more bytes
  // (round * 2 + scheduled) only when round >= 0.
  std::int64_t round = -1;
  bool scheduled = false;
};
struct IdMsg {  // Busy, Valid
  std::uint64_t exchange_id = 0;
};
// Valid: the commit vote. With clipped mixing it also carries the voter's clipping bound tau and
// the ||r - s|| it measured, so that both sides apply the same factor
// c = min(1, min(tau_a, tau_b) / max(norm_a, norm_b)) and the exchange still conserves the sum.
// 8 bytes (id only: no bound) or 24 (id, tau f64 > 0 and finite, norm f64 >= 0 and finite).
struct ValidMsg {
  std::uint64_t exchange_id = 0;
  double tau = 0.0;   // 0: this side imposes no bound
  double norm = 0.0;  // 0 with tau 0
};
struct CodeMsg {  // Refuse, Abort
  std::uint64_t exchange_id = 0;
  ExchangeCode code = ExchangeCode::Protocol;
};
// A chunk's payload bytes stay in the received message (data bytes follow the header).
struct ChunkView {
  std::uint64_t exchange_id = 0;
  std::uint64_t offset = 0;  // of the first data byte in the encoded vector
  std::size_t size = 0;      // data bytes
};

// Every message starts with the wire version byte (kExchangeWireVersion): a peer of another
// version fails to decode it and the exchange ends as a protocol violation. Version 2 added the
// training progress to REQUEST and ACCEPT, version 3 the step count.
inline constexpr std::uint8_t kExchangeWireVersion = 3;
constexpr std::size_t kRequestBytes = 51;
constexpr std::size_t kAcceptBytes = 33;
constexpr std::size_t kScheduleRequestBytes = kRequestBytes + 16;
constexpr std::size_t kScheduleAcceptBytes = kAcceptBytes + 8;
constexpr std::size_t kIdBytes = 9;
constexpr std::size_t kCodeBytes = 10;
constexpr std::size_t kValidClipBytes = 25;
// Chunk header: version, 7 zero bytes, exchange id, offset (the data stays 8-byte aligned).
constexpr std::size_t kChunkHeaderBytes = 24;

// A sample of an encoded vector's bytes, added up chunk by chunk in any order: the 4-byte word at
// every 64th byte of the vector (where a chunk holds it whole), mixed with its position. Equal for
// the same vector sent again in the same wire and chunking; an honest vector that moved by a
// training step or an averaging differs in nearly every word. A replay test, not a checksum: the
// AEAD already authenticates the bytes.
std::uint64_t payload_sample(const std::uint8_t* data, std::uint64_t offset, std::size_t size);

// "request", "accept", "busy", "refuse", "chunk", "valid", "abort"; "unknown" else.
std::string_view exchange_type_name(std::uint8_t type);

net::SharedBytes encode_request(const RequestMsg& m);
net::SharedBytes encode_accept(const AcceptMsg& m);
net::SharedBytes encode_id(std::uint64_t exchange_id);
// Without the bound when tau is 0.
net::SharedBytes encode_valid(const ValidMsg& m);
net::SharedBytes encode_code(std::uint64_t exchange_id, ExchangeCode code);
// Copies data[0, size) into a new chunk message after its header.
net::SharedBytes encode_chunk(std::uint64_t exchange_id, std::uint64_t offset,
                              const std::uint8_t* data, std::size_t size);
// Writes the header into the first kChunkHeaderBytes of a chunk message whose data is already in
// place (the averager downloads snapshots straight into their chunk messages: no copy).
void write_chunk_header(net::Bytes& msg, std::uint64_t exchange_id, std::uint64_t offset);

// Decoders: base::DecodeError (base/bytes.hpp) when the version, the size or a field is not
// right (an impossible value, trailing bytes).
RequestMsg decode_request(const net::Bytes& b);
AcceptMsg decode_accept(const net::Bytes& b);
IdMsg decode_id(const net::Bytes& b);
ValidMsg decode_valid(const net::Bytes& b);
CodeMsg decode_code(const net::Bytes& b);
// Also DecodeError for a chunk carrying no data. The data stays in b.
ChunkView decode_chunk(const net::Bytes& b);

}  // namespace gossiptrain::gossip
