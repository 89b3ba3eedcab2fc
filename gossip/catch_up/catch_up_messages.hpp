// Wire format of catch-up (message types 0x60-0x6F): a joining peer fetches one neighbour's whole
// training state (a checkpoint's bytes, core::encode_checkpoint). A version byte, then fixed
// little-endian fields, and decoders that check every size before anything is trusted, as
// exchange_messages.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/bytes.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Within gossip/dispatcher.hpp's kCatchUpTypeFirst..Last. The two halves go to different handlers
// (the serving side, CatchUpServer; the fetching side, CatchUpClient) so that both can share one
// dispatcher.
enum class CatchUpType : std::uint8_t {
  // fetcher -> server (0x60-0x67)
  Request = 0x60,      // asks for the server's current state
  CancelFetch = 0x61,  // the fetcher gives up (code); the server stops sending
  // server -> fetcher (0x68-0x6F)
  Accept = 0x68,  // taking it: the state follows at the server's next step boundary
  Busy = 0x69,    // serving someone else: ask again later or ask another peer
  Refuse = 0x6A,  // will not serve (code): another model, or no trained state to give
  Header = 0x6B,  // the state's total length, fingerprint and counters
  Chunk = 0x6C,   // a slice of the encoded state, in order (the exchange's chunk layout)
  End = 0x6D,     // everything was sent; CRC-32 of all the bytes
  Abort = 0x6E,   // the server gives up (code)
};
// The type byte on the wire.
constexpr std::uint8_t wire(CatchUpType t) { return static_cast<std::uint8_t>(t); }
inline constexpr std::uint8_t kCatchUpServerFirst = 0x60, kCatchUpServerLast = 0x67;
inline constexpr std::uint8_t kCatchUpClientFirst = 0x68, kCatchUpClientLast = 0x6F;

enum class CatchUpCode : std::uint8_t {
  Fingerprint = 1,  // another model
  Size = 2,         // another parameter count
  NotReady = 3,     // no trained state yet (has not taken a step: a joiner itself)
  Timeout = 4,
  Invalid = 5,  // the state failed validation
  Protocol = 6,
  Shutdown = 7,
  Fresh = 8,  // asked for a state carried over from earlier (CatchUpRequestMsg::resumed_only):
              // this peer started from its own initial weights, with the asker's cohort
};
// Stable lowercase token for logs and reasons; "unknown" for other values.
std::string_view catch_up_code_name(CatchUpCode c);

struct CatchUpRequestMsg {
  std::uint64_t id = 0;  // fetch id, echoed by every answer
  std::uint64_t fingerprint = 0;
  std::uint64_t n_params = 0;
  // A peer of a cohort that starts together (--min-peers above 1) asks only for a state that
  // carries a run on (the server resumed it from a checkpoint, or caught up itself): a server
  // that started from its own initial weights refuses (Fresh). Sent as a flags byte after
  // n_params (26 bytes); without it the request keeps its first layout (25 bytes), which every
  // server reads.
  bool resumed_only = false;
};
struct CatchUpHeaderMsg {
  std::uint64_t id = 0;
  std::uint64_t total_bytes = 0;  // of the encoded state that the chunks carry
  std::uint64_t fingerprint = 0;
  std::int64_t step = 0, epoch = 0, samples = 0;  // must equal those inside the state
};
struct CatchUpEndMsg {
  std::uint64_t id = 0;
  std::uint32_t crc32 = 0;  // core::crc32_update over all the bytes, the checkpoints' checksum
};
struct CatchUpCodeMsg {  // CancelFetch, Refuse, Abort
  std::uint64_t id = 0;
  CatchUpCode code = CatchUpCode::Protocol;
};

// Every message starts with the wire version byte (kCatchUpWireVersion).
inline constexpr std::uint8_t kCatchUpWireVersion = 1;
constexpr std::size_t kCatchUpRequestBytes = 25;
constexpr std::size_t kCatchUpRequestFlagsBytes = 26;  // with the flags byte (bit 0: resumed_only)
constexpr std::size_t kCatchUpHeaderBytes = 49;
constexpr std::size_t kCatchUpEndBytes = 13;
constexpr std::size_t kCatchUpCodeBytes = 10;
// Accept and Busy are a bare id (exchange_messages' encode_id/decode_id); Chunk is the exchange's
// chunk layout (encode_chunk/decode_chunk: version, id, offset, data).

net::SharedBytes encode_catch_up_request(const CatchUpRequestMsg& m);
net::SharedBytes encode_catch_up_header(const CatchUpHeaderMsg& m);
net::SharedBytes encode_catch_up_end(const CatchUpEndMsg& m);
net::SharedBytes encode_catch_up_code(std::uint64_t id, CatchUpCode code);

// base::DecodeError (base/bytes.hpp) when the version or the size is not right or a field
// holds an impossible value.
CatchUpRequestMsg decode_catch_up_request(const net::Bytes& b);
CatchUpHeaderMsg decode_catch_up_header(const net::Bytes& b);
CatchUpEndMsg decode_catch_up_end(const net::Bytes& b);
CatchUpCodeMsg decode_catch_up_code(const net::Bytes& b);

}  // namespace gossiptrain::gossip
