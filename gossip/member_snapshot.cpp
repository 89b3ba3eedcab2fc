// The thread-safe view of the member table (see member_snapshot.hpp).
#include "gossip/member_snapshot.hpp"

namespace gossiptrain::gossip {

void MemberSnapshot::reset(const std::vector<MemberInfo>& all) {
  std::lock_guard<std::mutex> lock(mu_);
  by_id_.clear();
  live_.clear();
  live_index_.clear();
  for (const auto& m : all) set_locked(m);
}

void MemberSnapshot::set(const MemberInfo& m) {
  std::lock_guard<std::mutex> lock(mu_);
  set_locked(m);
}

// The entry and the live list (O(1): swap with the last to remove); mu_ held.
void MemberSnapshot::set_locked(const MemberInfo& m) {
  by_id_.insert_or_assign(m.id, m);
  const bool live = m.id != self_id_ && is_live(m.state);
  auto it = live_index_.find(m.id);
  if (live && it == live_index_.end()) {
    live_index_.emplace(m.id, live_.size());
    live_.push_back(PeerRef{m.id, m.addr});
  } else if (live) {
    live_[it->second].addr = m.addr;
  } else if (it != live_index_.end()) {
    const std::size_t i = it->second;
    live_index_.erase(it);
    if (i + 1 != live_.size()) {
      live_[i] = std::move(live_.back());
      live_index_[live_[i].id] = i;
    }
    live_.pop_back();
  }
}

std::vector<PeerRef> MemberSnapshot::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

std::vector<MemberInfo> MemberSnapshot::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MemberInfo> out;
  out.reserve(by_id_.size());
  for (const auto& [id, m] : by_id_) out.push_back(m);
  return out;
}

std::optional<MemberInfo> MemberSnapshot::find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gossiptrain::gossip
