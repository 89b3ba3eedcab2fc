// Little-endian encoding of the membership messages; the reader bounds-checks every field.
#include "gossip/messages.hpp"

#include <charconv>

namespace gossiptrain::gossip {

const char* to_string(MemberState s) {
  switch (s) {
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
    case MemberState::kLeft: return "left";
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

class Writer {
 public:
  explicit Writer(std::size_t reserve) { b_.reserve(reserve); b_.push_back(kMembershipWireVersion); }
  void u8(std::uint8_t v) { b_.push_back(v); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  // Lengths are bounded by the same limits the reader enforces, so we never emit what a peer of
  // ours would reject.
  void str(const std::string& s, std::size_t max) {
    if (s.size() > max) throw std::invalid_argument("membership encode: string too long");
    u8(static_cast<std::uint8_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void update(const Update& u) {
    str(u.id, kMaxPeerIdBytes);
    str(u.addr, kMaxMemberAddrBytes);
    u64(u.incarnation);
    u8(static_cast<std::uint8_t>(u.state));
    str(u.from, kMaxPeerIdBytes);
  }
  void updates(const std::vector<Update>& v, std::size_t max) {
    if (v.size() > max) throw std::invalid_argument("membership encode: too many updates");
    u16(static_cast<std::uint16_t>(v.size()));
    for (const auto& u : v) update(u);
  }
  net::Bytes take() { return std::move(b_); }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  net::Bytes b_;
};

class Reader {
 public:
  Reader(const net::Bytes& b, std::size_t max_bytes) : b_(b) {
    if (b.size() > max_bytes) throw DecodeError("message too large");
    if (u8() != kMembershipWireVersion) throw DecodeError("unsupported wire version");
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::string str(std::size_t max, const char* what) {
    const std::size_t n = u8();
    if (n > max) throw DecodeError(std::string(what) + " too long");
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Update update() {
    Update u;
    u.id = str(kMaxPeerIdBytes, "member id");
    if (u.id.empty()) throw DecodeError("empty member id");
    u.addr = str(kMaxMemberAddrBytes, "member addr");
    if (!valid_addr(u.addr)) throw DecodeError("bad member addr");
    u.incarnation = u64();
    const std::uint8_t st = u8();
    if (st > static_cast<std::uint8_t>(MemberState::kLeft)) throw DecodeError("bad member state");
    u.state = static_cast<MemberState>(st);
    u.from = str(kMaxPeerIdBytes, "from id");
    if (u.state != MemberState::kAlive && u.from.empty()) throw DecodeError("accusation without from");
    return u;
  }
  std::vector<Update> updates(std::size_t max) {
    const std::size_t n = u16();
    if (n > max) throw DecodeError("too many members");
    // Each record is at least 13 bytes: checked before reserving, so a lying count costs nothing.
    need(n * 13);
    std::vector<Update> v;
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) v.push_back(update());
    return v;
  }
  void end() {
    if (pos_ != b_.size()) throw DecodeError("trailing bytes");
  }

 private:
  void need(std::size_t n) {
    if (b_.size() - pos_ < n) throw DecodeError("truncated");
  }
  std::uint64_t get(int n) {
    need(static_cast<std::size_t>(n));
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  const net::Bytes& b_;
  std::size_t pos_ = 0;
};

}  // namespace

net::Bytes encode(const PingMsg& m) {
  Writer w(64 + m.updates.size() * 64);
  w.u32(m.seq);
  w.str(m.target_id, kMaxPeerIdBytes);
  w.updates(m.updates, kMaxUpdatesPerMessage);
  return w.take();
}

net::Bytes encode(const AckMsg& m) {
  Writer w(16 + m.updates.size() * 64);
  w.u32(m.seq);
  w.updates(m.updates, kMaxUpdatesPerMessage);
  return w.take();
}

net::Bytes encode(const PingReqMsg& m) {
  Writer w(160 + m.updates.size() * 64);
  w.u32(m.seq);
  w.str(m.target_id, kMaxPeerIdBytes);
  w.str(m.target_addr, kMaxMemberAddrBytes);
  w.updates(m.updates, kMaxUpdatesPerMessage);
  return w.take();
}

net::Bytes encode(const SyncMsg& m) {
  Writer w(16 + m.members.size() * 64);
  w.u32(m.seq);
  w.u8(m.join ? 1 : 0);
  w.updates(m.members, kMaxSyncMembers);
  return w.take();
}

net::Bytes encode(const GossipMsg& m) {
  Writer w(8 + m.updates.size() * 64);
  w.updates(m.updates, kMaxUpdatesPerMessage);
  return w.take();
}

PingMsg decode_ping(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  PingMsg m;
  m.seq = r.u32();
  m.target_id = r.str(kMaxPeerIdBytes, "target id");
  if (m.target_id.empty()) throw DecodeError("empty target id");
  m.updates = r.updates(kMaxUpdatesPerMessage);
  r.end();
  return m;
}

AckMsg decode_ack(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  AckMsg m;
  m.seq = r.u32();
  m.updates = r.updates(kMaxUpdatesPerMessage);
  r.end();
  return m;
}

PingReqMsg decode_ping_req(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  PingReqMsg m;
  m.seq = r.u32();
  m.target_id = r.str(kMaxPeerIdBytes, "target id");
  if (m.target_id.empty()) throw DecodeError("empty target id");
  m.target_addr = r.str(kMaxMemberAddrBytes, "target addr");
  if (!valid_addr(m.target_addr)) throw DecodeError("bad target addr");
  m.updates = r.updates(kMaxUpdatesPerMessage);
  r.end();
  return m;
}

SyncMsg decode_sync(const net::Bytes& b) {
  Reader r(b, kMaxSyncMessageBytes);
  SyncMsg m;
  m.seq = r.u32();
  const std::uint8_t join = r.u8();
  if (join > 1) throw DecodeError("bad join flag");
  m.join = join == 1;
  m.members = r.updates(kMaxSyncMembers);
  r.end();
  return m;
}

GossipMsg decode_gossip(const net::Bytes& b) {
  Reader r(b, kMaxSmallMessageBytes);
  GossipMsg m;
  m.updates = r.updates(kMaxUpdatesPerMessage);
  r.end();
  return m;
}

}  // namespace gossiptrain::gossip
