// Wire encoding of the membership protocol (SWIM + push-pull sync), message types 0x10-0x2F.
// Decoding checks every length and field before allocating, and throws DecodeError on bad input.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/bytes.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

// Every membership message starts with this byte; a mismatch closes the connection. Version 2
// added the sender's progress word to ping, ping-req and ack.
inline constexpr std::uint8_t kMembershipWireVersion = 2;

// Message types, inside the membership range of the Dispatcher (0x10-0x2F).
enum class MembershipType : std::uint8_t {
  Ping = 0x10,       // direct probe: seq, target id, piggybacked updates
  Ack = 0x11,        // answer to a ping (also relayed by an indirect pinger)
  PingReq = 0x12,    // "please ping target for me" (indirect probe)
  Sync = 0x13,       // push-pull: the sender's full member list (join, anti-entropy)
  SyncReply = 0x14,  // the receiver's full member list, after merging the sender's
  Gossip = 0x15,     // only piggybacked updates (dissemination, leave)
};
// The type byte on the wire.
constexpr std::uint8_t wire(MembershipType t) { return static_cast<std::uint8_t>(t); }

// Input bounds: what a remote may make us parse or allocate.
inline constexpr std::size_t kMaxPeerIdBytes = 64;
inline constexpr std::size_t kMaxMemberAddrBytes = 128;   // = net::kMaxAddrBytes
inline constexpr std::size_t kMaxUpdatesPerMessage = 256;  // piggyback on ping/ack/gossip
inline constexpr std::size_t kMaxSyncMembers = 32768;      // the member table too
inline constexpr std::size_t kMaxSmallMessageBytes = 256u << 10;
inline constexpr std::size_t kMaxSyncMessageBytes = 16u << 20;

enum class MemberState : std::uint8_t { Alive = 0, Suspect = 1, Dead = 2, Left = 3 };
const char* to_string(MemberState s);

// One member's state as gossiped: memberlist's alive/suspect/dead messages in one record.
// For suspect and dead, `from` names who accused; dead with from == id is a graceful leave.
struct Update {
  std::string id;
  std::string addr;
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::Alive;
  std::string from;
  bool operator==(const Update&) const = default;
};

// What the sender says of its own training in every ping, ping-req and ack: the fraction of its
// run done and its optimizer steps, as an exchange's REQUEST and ACCEPT say them. So --max-ahead
// hears every member's progress every few probe periods, not only its exchange partners' (a peer
// on a slow link exchanged 13 times in a whole run and never learned that it ran ahead). It is
// attributed to the connection's authenticated peer, never to a member the message names.
struct ProgressWord {
  double progress = -1;   // -1: not known (no training yet, or no trainer), else in [0, 1]
  std::int64_t step = 0;  // >= 0
  bool operator==(const ProgressWord&) const = default;
};

// On the wire the progress word comes before the update list (which ends every message).
struct PingMsg {
  std::uint32_t seq = 0;
  std::string target_id;  // a ping meant for someone else (address reuse) is ignored
  std::vector<Update> updates;
  ProgressWord self;
};
struct AckMsg {
  std::uint32_t seq = 0;
  std::vector<Update> updates;
  ProgressWord self;
};
struct PingReqMsg {
  std::uint32_t seq = 0;
  std::string target_id;
  std::string target_addr;
  std::vector<Update> updates;
  ProgressWord self;
};
struct SyncMsg {  // MembershipType::Sync and SyncReply
  std::uint32_t seq = 0;
  bool join = false;
  std::vector<Update> members;
};
struct GossipMsg {
  std::vector<Update> updates;
};

using base::DecodeError;

// Each message's encoder and its decoder.
net::Bytes encode(const PingMsg& m);
PingMsg decode_ping(const net::Bytes& b);
net::Bytes encode(const AckMsg& m);
AckMsg decode_ack(const net::Bytes& b);
net::Bytes encode(const PingReqMsg& m);
PingReqMsg decode_ping_req(const net::Bytes& b);
net::Bytes encode(const SyncMsg& m);
SyncMsg decode_sync(const net::Bytes& b);
net::Bytes encode(const GossipMsg& m);
GossipMsg decode_gossip(const net::Bytes& b);

// "host:port" with a non-empty host and a port in 1..65535.
bool valid_addr(const std::string& addr);

}  // namespace gossiptrain::gossip
