// Little-endian encoding of the membership messages; the reader bounds-checks every field.
#include "gossip/membership/messages.hpp"

#include <charconv>

#include "gossip/message_codec.hpp"

namespace gossiptrain::gossip {

const char* to_string(MemberState s) {
  switch (s) {
    case MemberState::Alive: return "alive";
    case MemberState::Suspect: return "suspect";
    case MemberState::Dead: return "dead";
    case MemberState::Left: return "left";
  }
  return "unknown";
}

bool valid_addr(const std::string& addr) {
  if (addr.empty() || addr.size() > kMaxMemberAddrBytes) return false;
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  unsigned port = 0;
  const char* first = addr.data() + colon + 1;
  const char* last = addr.data() + addr.size();
  auto [p, ec] = std::from_chars(first, last, port);
  return ec == std::errc() && p == last && port >= 1 && port <= 65535;
}

namespace {

// Membership's fields on top of the shared codec: the version byte first, and an update record.
// Lengths are bounded by the same limits the reader enforces, so we never emit what a peer of
// ours would reject.
class Writer : public base::ByteWriter {
 public:
  explicit Writer(std::size_t reserve) : ByteWriter(reserve) { u8(kMembershipWireVersion); }
  void word(const ProgressWord& p) {
    if (!codec::valid_progress(p.progress) || p.step < 0)
      throw std::invalid_argument("membership encode: progress word out of range");
    f64(p.progress);
    u64(static_cast<std::uint64_t>(p.step));
  }
  void update(const Update& u) {
    str8(u.id, kMaxPeerIdBytes);
    str8(u.addr, kMaxMemberAddrBytes);
    u64(u.incarnation);
    u8(static_cast<std::uint8_t>(u.state));
    str8(u.from, kMaxPeerIdBytes);
  }
  // Every message ends with its update list: the message's bytes.
  net::Bytes take_with(const std::vector<Update>& v, std::size_t max) {
    if (v.size() > max) throw std::invalid_argument("membership encode: too many updates");
    u16(static_cast<std::uint16_t>(v.size()));
    for (const auto& u : v) update(u);
    return take();
  }
};

class Reader : public base::ByteReader {
 public:
  Reader(const net::Bytes& b, std::size_t max_bytes) : ByteReader(b) {
    if (b.size() > max_bytes) throw DecodeError("message too large");
    if (u8() != kMembershipWireVersion) throw DecodeError("unsupported wire version");
  }
  Update update() {
    Update u;
    u.id = str8(kMaxPeerIdBytes, "member id");
    if (u.id.empty()) throw DecodeError("empty member id");
    u.addr = str8(kMaxMemberAddrBytes, "member addr");
    if (!valid_addr(u.addr)) throw DecodeError("bad member addr");
    u.incarnation = u64();
    const std::uint8_t st = u8();
    if (st > static_cast<std::uint8_t>(MemberState::Left)) throw DecodeError("bad member state");
    u.state = static_cast<MemberState>(st);
    u.from = str8(kMaxPeerIdBytes, "from id");
    if (u.state != MemberState::Alive && u.from.empty())
      throw DecodeError("accusation without from");
    return u;
  }
  std::string target_id() {
    std::string id = str8(kMaxPeerIdBytes, "target id");
    if (id.empty()) throw DecodeError("empty target id");
    return id;
  }
  std::string target_addr() {
    std::string addr = str8(kMaxMemberAddrBytes, "target addr");
    if (!valid_addr(addr)) throw DecodeError("bad target addr");
    return addr;
  }
  ProgressWord word() {
    ProgressWord p;
    p.progress = codec::progress(*this);
    p.step = codec::counter(*this, "step");
    return p;
  }
  bool flag(const char* what) {
    const std::uint8_t v = u8();
    if (v > 1) throw DecodeError(what);
    return v == 1;
  }
  // Every message ends with its update list: nothing may follow it.
  std::vector<Update> last_updates(std::size_t max) {
    const std::size_t n = u16();
    if (n > max) throw DecodeError("too many members");
    // Each record is at least 13 bytes: checked before reserving, so a lying count costs nothing.
    need(n * 13);
    std::vector<Update> v;
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) v.push_back(update());
    end();
    return v;
  }
};

}  // namespace

net::Bytes encode(const PingMsg& m) {
  Writer w(80 + m.updates.size() * 64);
  w.u32(m.seq);
  w.str8(m.target_id, kMaxPeerIdBytes);
  w.word(m.self);
  return w.take_with(m.updates, kMaxUpdatesPerMessage);
}

net::Bytes encode(const AckMsg& m) {
  Writer w(32 + m.updates.size() * 64);
  w.u32(m.seq);
  w.word(m.self);
  return w.take_with(m.updates, kMaxUpdatesPerMessage);
}

net::Bytes encode(const PingReqMsg& m) {
  Writer w(176 + m.updates.size() * 64);
  w.u32(m.seq);
  w.str8(m.target_id, kMaxPeerIdBytes);
  w.str8(m.target_addr, kMaxMemberAddrBytes);
  w.word(m.self);
  return w.take_with(m.updates, kMaxUpdatesPerMessage);
}

net::Bytes encode(const SyncMsg& m) {
  Writer w(16 + m.members.size() * 64);
  w.u32(m.seq);
  w.u8(m.join ? 1 : 0);
  return w.take_with(m.members, kMaxSyncMembers);
}

net::Bytes encode(const GossipMsg& m) {
  Writer w(8 + m.updates.size() * 64);
  return w.take_with(m.updates, kMaxUpdatesPerMessage);
}

// The fields are read in order: a braced list evaluates its elements left to right.
PingMsg decode_ping(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  PingMsg m;
  m.seq = r.u32();
  m.target_id = r.target_id();
  m.self = r.word();
  m.updates = r.last_updates(kMaxUpdatesPerMessage);
  return m;
}

AckMsg decode_ack(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  AckMsg m;
  m.seq = r.u32();
  m.self = r.word();
  m.updates = r.last_updates(kMaxUpdatesPerMessage);
  return m;
}

PingReqMsg decode_ping_req(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  PingReqMsg m;
  m.seq = r.u32();
  m.target_id = r.target_id();
  m.target_addr = r.target_addr();
  m.self = r.word();
  m.updates = r.last_updates(kMaxUpdatesPerMessage);
  return m;
}

SyncMsg decode_sync(const net::Bytes& b) {
  Reader r(b, kMaxSyncMessageBytes);
  return SyncMsg{r.u32(), r.flag("bad join flag"), r.last_updates(kMaxSyncMembers)};
}

GossipMsg decode_gossip(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  return GossipMsg{r.last_updates(kMaxUpdatesPerMessage)};
}

}  // namespace gossiptrain::gossip
