// The thread-safe view of the member table (see member_snapshot.hpp).
#include "gossip/member_snapshot.hpp"

namespace gossiptrain::gossip {

void MemberSnapshot::reset(const std::vector<MemberInfo>& all) {
  std::lock_guard<std::mutex> lock(mu_);
  by_id_.clear();
  live_.clear();
  for (const auto& m : all) set_locked(m);
}

void MemberSnapshot::set(const MemberInfo& m) {
  std::lock_guard<std::mutex> lock(mu_);
  set_locked(m);
}

// The entry and the live list (O(1): swap with the last to remove); mu_ held. An entry's info
// changes in place: its id, the set's key, never does.
void MemberSnapshot::set_locked(const MemberInfo& m) {
  auto it = by_id_.find(m.id);
  if (it == by_id_.end()) it = by_id_.insert(Entry{m}).first;
  else const_cast<MemberInfo&>(it->info) = m;
  const Entry& e = *it;
  const bool live = m.id != self_id_ && is_live(m.state);
  if (live && e.live_pos == kNotLive) {
    e.live_pos = live_.size();
    live_.push_back(&e);
  } else if (!live && e.live_pos != kNotLive) {
    const std::size_t i = e.live_pos;
    e.live_pos = kNotLive;
    if (i + 1 != live_.size()) {
      live_[i] = live_.back();
      live_[i]->live_pos = i;
    }
    live_.pop_back();
  }
}

std::vector<PeerRef> MemberSnapshot::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PeerRef> out;
  out.reserve(live_.size());
  for (const Entry* e : live_) out.push_back(PeerRef{e->info.id, e->info.addr});
  return out;
}

std::vector<MemberInfo> MemberSnapshot::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  out.reserve(by_id_.size());
  for (const auto& e : by_id_) out.push_back(e.info);
  return out;
}

std::optional<MemberInfo> MemberSnapshot::find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->info;
}

}  // namespace gossiptrain::gossip
