// The member table as other threads see it. Membership changes it on its protocol thread; the
// training thread and the averager read it (live peers for an exchange, the member list for logs
// and the launcher). Every member by id, and the live ones but ourselves as a list kept up to date
// in O(1) per change, so an exchange never walks the table.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gossip/messages.hpp"
#include "gossip/peer_directory.hpp"

namespace gossiptrain::gossip {

struct MemberInfo {
  std::string id;
  std::string addr;
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::Alive;
  bool operator==(const MemberInfo&) const = default;
};

inline bool is_live(MemberState s) { return s == MemberState::Alive || s == MemberState::Suspect; }

// Thread-safe.
class MemberSnapshot {
 public:
  explicit MemberSnapshot(std::string self_id) : self_id_(std::move(self_id)) {}
  // The whole table anew (one lock: a reader sees the old table or the new one).
  void reset(const std::vector<MemberInfo>& all);
  // One member changed (or appeared).
  void set(const MemberInfo& m);
  std::vector<PeerRef> live() const;    // alive or suspect, not ourselves; in no order
  std::vector<MemberInfo> all() const;  // by id, ourselves included
  std::optional<MemberInfo> find(const std::string& id) const;

 private:
  // A member and its place in live_ (kNotLive when not there). Entries are nodes of a std::set,
  // so live_ can point at them: one copy of each member, whatever a swarm's size (a simulated
  // swarm of n peers holds n^2 of them).
  static constexpr std::size_t kNotLive = static_cast<std::size_t>(-1);
  struct Entry {
    MemberInfo info;
    mutable std::size_t live_pos = kNotLive;  // not part of the ordering
  };
  struct ById {
    using is_transparent = void;
    bool operator()(const Entry& a, const Entry& b) const { return a.info.id < b.info.id; }
    bool operator()(const Entry& a, const std::string& b) const { return a.info.id < b; }
    bool operator()(const std::string& a, const Entry& b) const { return a < b.info.id; }
  };
  void set_locked(const MemberInfo& m);

  const std::string self_id_;
  mutable std::mutex mu_;
  std::set<Entry, ById> by_id_;
  std::vector<const Entry*> live_;  // alive or suspect, not ourselves
};

}  // namespace gossiptrain::gossip
