// The compact member table and its transmit queue (see member_table.hpp).
#include "gossip/membership/member_table.hpp"

#include <algorithm>
#include "base/assert.hpp"
#include <functional>

namespace gossiptrain::gossip {

// ---------------------------------------------------------------------------------------------
// NameTable

namespace {
std::uint64_t hash_of(const std::string& s) { return std::hash<std::string>{}(s); }
std::uint64_t tag_of(std::uint64_t hash) { return hash >> 32; }
}  // namespace

// The slot holding s, or the empty slot where it would go.
std::size_t NameTable::probe(const std::string& s, std::uint64_t hash) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const std::uint64_t v = slots_[i];
    if (v == 0) return i;
    if ((v >> 32) == tag_of(hash) && names_[(v & 0xffffffffu) - 1] == s) return i;
  }
}

void NameTable::grow() {
  std::vector<std::uint64_t> old(slots_.size() * 2, 0);
  old.swap(slots_);
  for (std::uint64_t v : old) {
    if (v == 0) continue;
    const std::uint64_t hash = hash_of(names_[(v & 0xffffffffu) - 1]);
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = v;
  }
}

NameId NameTable::intern(const std::string& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t hash = hash_of(s);
  std::size_t i = probe(s, hash);
  if (slots_[i] != 0) return static_cast<NameId>((slots_[i] & 0xffffffffu) - 1);
  if (2 * (names_.size() + 1) > slots_.size()) {  // load factor at most 1/2
    grow();
    i = probe(s, hash);
  }
  const auto id = static_cast<NameId>(names_.size());
  names_.push_back(s);
  slots_[i] = (tag_of(hash) << 32) | (std::uint64_t{id} + 1);
  return id;
}

std::optional<NameId> NameTable::find(const std::string& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t v = slots_[probe(s, hash_of(s))];
  if (v == 0) return std::nullopt;
  return static_cast<NameId>((v & 0xffffffffu) - 1);
}

const std::string& NameTable::name(NameId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_.at(id);
}

std::size_t NameTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_.size();
}

// ---------------------------------------------------------------------------------------------
// MemberTable: rows

namespace {
// A queue key: bit 63 set for join news, transmits in bits 48-62, then newest first.
constexpr int kTransmitShift = 48;
constexpr std::uint64_t kOrderMask = (std::uint64_t{1} << kTransmitShift) - 1;
constexpr std::uint64_t kJoinBit = std::uint64_t{1} << 63;
int transmits_of(std::uint64_t key) {
  return static_cast<int>((key & ~kJoinBit) >> kTransmitShift);
}
}  // namespace

MemberTable::MemberTable(std::shared_ptr<MemberNames> names, const std::string& self_id,
                         const std::string& self_addr, std::uint64_t incarnation, Millis now)
    : names_(std::move(names)) {
  add(names_->ids.intern(self_id), names_->addrs.intern(self_addr), incarnation, now);
}

const MemberTable::Row* MemberTable::find(NameId id) const {
  if (id >= slot_of_.size() || slot_of_[id] == kNotLive) return nullptr;
  return &rows_[slot_of_[id]];
}

const MemberTable::Row* MemberTable::find(const std::string& id) const {
  const auto n = names_->ids.find(id);
  return n ? find(*n) : nullptr;
}

const MemberTable::Row& MemberTable::add(NameId id, NameId addr, std::uint64_t incarnation,
                                         Millis now) {
  GT_ASSERT(!find(id));
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= slot_of_.size()) {
    // Grown in steps of 1024 names (not doubled): at most 4 KB spare per table.
    const std::size_t size = (id / 1024 + 1) * 1024;
    slot_of_.reserve(size);
    slot_of_.resize(size, kNotLive);
  }
  slot_of_[id] = static_cast<std::uint32_t>(rows_.size());
  Row r;
  r.id = id;
  r.addr = addr;
  r.incarnation = incarnation;
  r.state_change = now;
  rows_.push_back(r);
  relist(rows_.back());
  ++ids_version_;
  return rows_.back();
}

void MemberTable::remove(NameId id) {
  const Row* r = find(id);
  GT_ASSERT(r && r != &rows_[0]);
  std::lock_guard<std::mutex> lock(mu_);
  Row& row = row_of(id);
  if (row.queue_key) --queued_;
  row.state = MemberState::Dead;  // off the live list
  relist(row);
  ++ids_version_;
  const std::uint32_t slot = slot_of_[id];
  slot_of_[id] = kNotLive;
  if (slot + 1 != rows_.size()) {
    rows_[slot] = rows_.back();
    slot_of_[rows_[slot].id] = slot;
    if (rows_[slot].live_pos != kNotLive) live_[rows_[slot].live_pos] = slot;
  }
  rows_.pop_back();
}

// The live list: O(1) per change (swap with the last to remove).
void MemberTable::relist(Row& row) {
  const bool live = &row != &rows_[0] && is_live(row.state);
  if (live && row.live_pos == kNotLive) {
    row.live_pos = static_cast<std::uint32_t>(live_.size());
    live_.push_back(slot_of_[row.id]);
  } else if (!live && row.live_pos != kNotLive) {
    const std::uint32_t i = row.live_pos;
    row.live_pos = kNotLive;
    if (i + 1 != live_.size()) {
      live_[i] = live_.back();
      rows_[live_[i]].live_pos = i;
    }
    live_.pop_back();
  }
}

// ---------------------------------------------------------------------------------------------
// MemberTable: the transmit queue, a binary heap of (key, member). A member's row holds the key
// of its one current entry; entries left behind by a newer update are skipped when they surface.

void MemberTable::queue(const Row& r, MemberState state, std::uint64_t incarnation, NameId from,
                        News news) {
  Row& row = row_of(r.id);
  if (!row.queue_key) ++queued_;
  // Transmits 0, newest first; never 0, which marks a row with nothing queued.
  const std::uint64_t key = (news == News::Join ? kJoinBit : 0) +
                            std::max<std::uint64_t>(1, kOrderMask - (++order_ & kOrderMask));
  row.queue_key = key;
  row.queued_state = state;
  row.queued_incarnation = incarnation;
  row.queued_from = from;
  queue_push(Queued{key, r.id});
}

namespace {
// The heap's order: the smallest key on top.
template <class Q>
bool after(const Q& a, const Q& b) {
  return a.key > b.key;
}
}  // namespace

void MemberTable::queue_push(Queued q) {
  heap_.push_back(q);
  std::push_heap(heap_.begin(), heap_.end(), after<Queued>);
}

MemberTable::Queued MemberTable::queue_pop() {
  std::pop_heap(heap_.begin(), heap_.end(), after<Queued>);
  const Queued q = heap_.back();
  heap_.pop_back();
  return q;
}

std::vector<Update> MemberTable::take(std::size_t max, int limit) {
  std::vector<Update> out;
  std::vector<Queued> again;
  while (out.size() < max && !heap_.empty()) {
    const Queued q = queue_pop();
    const Row* found = find(q.id);
    if (!found || found->queue_key != q.key) continue;  // stale: replaced or removed
    Row& row = row_of(q.id);
    const int transmits = transmits_of(q.key);
    if (transmits < limit) {
      out.push_back(Update{id_str(row), addr_str(row), row.queued_incarnation, row.queued_state,
                           row.queued_from == kNoName ? std::string() : id_str(row.queued_from)});
    }
    if (transmits + 1 < limit) {
      row.queue_key = q.key + (std::uint64_t{1} << kTransmitShift);
      again.push_back(Queued{row.queue_key, q.id});
    } else {
      row.queue_key = 0;
      --queued_;
    }
  }
  for (const Queued& q : again) queue_push(q);
  if (queued_ == 0) heap_.clear();  // only stale entries left
  return out;
}

// ---------------------------------------------------------------------------------------------
// MemberTable: thread-safe reads

MemberInfo MemberTable::info_of(const Row& r) const {
  return MemberInfo{id_str(r.id), addr_str(r.addr), r.incarnation, r.state};
}

PeerRef MemberTable::ref_of(const Row& r) const { return PeerRef{id_str(r.id), addr_str(r.addr)}; }

std::vector<PeerRef> MemberTable::live_peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PeerRef> out;
  out.reserve(live_.size());
  for (std::uint32_t slot : live_) out.push_back(ref_of(rows_[slot]));
  return out;
}

std::size_t MemberTable::live_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

std::vector<PeerRef> MemberTable::live_sample(std::size_t k, base::ProtocolRng& rng) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t n = live_.size();
  std::vector<PeerRef> out;
  if (n <= 2 * k) {  // most of them: all, shuffled
    for (std::uint32_t slot : live_) out.push_back(ref_of(rows_[slot]));
    base::shuffle(out, rng);
    out.resize(std::min(k, out.size()));
    return out;
  }
  std::vector<std::uint32_t> picked;  // distinct positions in live_, by rejection (k << n)
  while (picked.size() < k) {
    const auto pos = static_cast<std::uint32_t>(rng.below(n));
    if (std::find(picked.begin(), picked.end(), pos) == picked.end()) picked.push_back(pos);
  }
  for (std::uint32_t pos : picked) out.push_back(ref_of(rows_[live_[pos]]));
  return out;
}

std::vector<MemberInfo> MemberTable::all() const {
  std::vector<MemberInfo> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(rows_.size());
    for (const Row& r : rows_) out.push_back(info_of(r));
  }
  std::sort(out.begin(), out.end(),
            [](const MemberInfo& a, const MemberInfo& b) { return a.id < b.id; });
  return out;
}

std::vector<std::string> MemberTable::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(rows_.size());
  for (std::size_t slot = 1; slot < rows_.size(); ++slot) out.push_back(id_str(rows_[slot].id));
  return out;
}

std::uint64_t MemberTable::ids_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ids_version_;
}

std::optional<PeerRef> MemberTable::live_ref(const std::string& id) const {
  const auto n = names_->ids.find(id);
  if (!n) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const Row* r = find(*n);
  if (!r || r == &rows_[0] || !is_live(r->state)) return std::nullopt;
  return ref_of(*r);
}

std::optional<MemberInfo> MemberTable::info(const std::string& id) const {
  const auto n = names_->ids.find(id);
  if (!n) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const Row* r = find(*n);
  if (!r) return std::nullopt;
  return info_of(*r);
}

std::uint64_t MemberTable::self_incarnation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_[0].incarnation;
}

DeadCount count_dead(const std::vector<MemberInfo>& members) {
  DeadCount c;
  for (const auto& m : members) {
    if (m.state == MemberState::Left) continue;
    ++c.known;
    if (m.state == MemberState::Dead) ++c.dead;
    if (m.state == MemberState::Suspect) ++c.suspect;
  }
  return c;
}

}  // namespace gossiptrain::gossip
