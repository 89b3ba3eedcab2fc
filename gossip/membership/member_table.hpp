// Membership's member table: every member known (ourselves included) as a compact row of numbers,
// the transmit queue of updates still to piggyback, and the thread-safe reads other threads make
// (the live peers for an exchange, the member list for logs and the launcher).
//
// Peer ids and addresses are interned (NameTable): a row holds two 32-bit names, not two strings.
// gossip-sim runs thousands of peers in one process, each with a table of every other, so the
// table is n^2 rows there: the interned names are shared by all of them, and a row with its queue
// entry costs about 80 bytes (docs/sim.md, "gossip-sim", "Scale").
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "gossip/membership/messages.hpp"
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

using NameId = std::uint32_t;
inline constexpr NameId kNoName = static_cast<NameId>(-1);

// Interned strings: each distinct string gets a number once, for the life of the table (names are
// never forgotten, so a long-lived peer's table grows with every id and address it ever accepted
// into its member table). Thread-safe; the strings never move, so name() references stay valid.
class NameTable {
 public:
  NameId intern(const std::string& s);
  std::optional<NameId> find(const std::string& s) const;
  const std::string& name(NameId id) const;
  std::size_t size() const;

 private:
  // Open addressing with linear probing: each slot holds a 32-bit tag of the string's hash and
  // its number + 1 (0: empty). A lookup costs about one cache miss for the slot and one for the
  // string, where a node-based map costs three (gossip-sim looks names up hundreds of millions
  // of times at 10,000 peers).
  std::size_t probe(const std::string& s, std::uint64_t hash) const;  // mu_ held
  void grow();                                                        // mu_ held
  mutable std::mutex mu_;
  std::deque<std::string> names_;
  std::vector<std::uint64_t> slots_ = std::vector<std::uint64_t>(64, 0);  // a power of 2
};

// Peer ids and addresses. One per Membership by default; a process that runs many peers shares
// one (MembershipConfig::names).
struct MemberNames {
  NameTable ids;
  NameTable addrs;
};

struct MemberInfo {
  std::string id;
  std::string addr;
  std::uint64_t incarnation = 0;
  MemberState state = MemberState::Alive;
  bool operator==(const MemberInfo&) const = default;
};

inline bool is_live(MemberState s) { return s == MemberState::Alive || s == MemberState::Suspect; }

// How many of `members` (ourselves included, as Membership::members() lists them) are dead
// without having left, how many suspected, and how many are known and not left: what a lingering
// peer reads to tell a partition (a third or more of the swarm gone silent at once) from peers that
// finished and left.
struct DeadCount {
  std::size_t dead = 0;
  std::size_t suspect = 0;
  std::size_t known = 0;
  // Two or more members dead and at least a third of those known: one crash is not a partition.
  bool partition_suspected() const { return dead >= 2 && 3 * dead >= known; }
  // The same counting the suspects too: members silent for a probe round or more, on their way to
  // dead unless they answer. A split is declared only a suspicion timeout after it (11 s in a
  // 4-peer run under load): a peer whose linger ends in between must not take it for nothing.
  bool partition_possible() const {
    const std::size_t silent = dead + suspect;
    return silent >= 2 && 3 * silent >= known;
  }
};
DeadCount count_dead(const std::vector<MemberInfo>& members);

// Written on the membership's protocol thread only, under a lock; the protocol thread reads
// without it, other threads through the locked readers at the end.
class MemberTable {
 public:
  using Millis = std::chrono::milliseconds;
  struct Row {
    std::uint64_t incarnation = 0;
    Millis state_change{0};
    // Its update in the transmit queue, when queue_key is not 0 (the member's id and current
    // address, with this state, incarnation and accuser).
    std::uint64_t queue_key = 0;
    std::uint64_t queued_incarnation = 0;
    NameId id = kNoName;
    NameId addr = kNoName;
    NameId queued_from = kNoName;  // kNoName: none
    std::uint32_t live_pos = kNotLive;
    MemberState state = MemberState::Alive;
    MemberState queued_state = MemberState::Alive;
  };

  MemberTable(std::shared_ptr<MemberNames> names, const std::string& self_id,
              const std::string& self_addr, std::uint64_t incarnation, Millis now);

  MemberNames& names() { return *names_; }
  const std::string& id_str(NameId id) const { return names_->ids.name(id); }
  const std::string& addr_str(NameId addr) const { return names_->addrs.name(addr); }
  const std::string& id_str(const Row& r) const { return id_str(r.id); }
  const std::string& addr_str(const Row& r) const { return addr_str(r.addr); }

  // Protocol thread. Row pointers and references stay valid until the next add() or remove().
  const Row* find(NameId id) const;
  const Row* find(const std::string& id) const;
  const Row& self() const { return rows_[0]; }
  NameId self_id() const { return rows_[0].id; }
  std::size_t size() const { return rows_.size(); }              // ourselves included
  const Row& at(std::size_t slot) const { return rows_[slot]; }  // slot 0 is ourselves
  std::size_t live_members() const { return live_.size() + (is_live(self().state) ? 1 : 0); }

  // Writes (protocol thread). add() takes a member not in the table.
  const Row& add(NameId id, NameId addr, std::uint64_t incarnation, Millis now);
  void remove(NameId id);  // not ourselves
  // Changes a member's fields through f(row) under the lock, then keeps the live list in step.
  template <class F>
  void modify(const Row& r, F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    Row& row = row_of(r.id);
    f(row);
    relist(row);
  }

  // The transmit queue (memberlist's TransmitLimitedQueue): one update per member, a newer one
  // replacing the older; taken least transmitted first, then newest, each until it has gone out
  // `limit` times (the limit shrinks with the swarm, so an update may leave before that).
  // Failure-detector news (suspect, dead, left, a refutation, a member back alive) all go before
  // any join news: while a large swarm joins, new members' news arrives faster than it drains,
  // and ordered by transmits alone a refutation sent once would wait behind every join still to
  // go out, until the suspicion it answers has expired into a false death.
  enum class News : std::uint8_t { Failure, Join };
  void queue(const Row& r, MemberState state, std::uint64_t incarnation, NameId from,
             News news = News::Failure);
  std::vector<Update> take(std::size_t max, int limit);
  bool queue_empty() const { return queued_ == 0; }
  std::size_t queued() const { return queued_; }

  // Thread-safe reads.
  std::vector<PeerRef> live_peers() const;  // alive or suspect, not ourselves; in no order
  std::size_t live_count() const;           // of those
  std::vector<PeerRef> live_sample(std::size_t k, base::ProtocolRng& rng) const;
  std::vector<MemberInfo> all() const;  // by id, ourselves included
  std::vector<std::string> ids() const;  // every member's id but ours, in no order
  std::uint64_t ids_version() const;     // counts the adds and removes
  std::optional<PeerRef> live_ref(const std::string& id) const;  // when live, not ourselves
  std::optional<MemberInfo> info(const std::string& id) const;
  std::uint64_t self_incarnation() const;
  // A row as other code sees a member (the names resolved).
  MemberInfo info_of(const Row& r) const;

 private:
  static constexpr std::uint32_t kNotLive = static_cast<std::uint32_t>(-1);
  struct Queued {
    std::uint64_t key;  // join news in the top bit, then transmits, then newest first
    NameId id;
  };
  Row& row_of(NameId id) { return rows_[slot_of_[id]]; }  // a member of the table
  void relist(Row& row);                                   // mu_ held
  PeerRef ref_of(const Row& r) const;
  void queue_push(Queued q);
  Queued queue_pop();

  std::shared_ptr<MemberNames> names_;
  mutable std::mutex mu_;
  // [0] is ourselves. A deque: no spare capacity of up to the table's size, as a vector's
  // doubling leaves (a simulated swarm of n peers holds n^2 rows).
  std::deque<Row> rows_;
  std::vector<std::uint32_t> slot_of_;  // by NameId of an id; kNotLive: not a member
  std::vector<std::uint32_t> live_;     // slots of the live members but ourselves
  std::vector<Queued> heap_;  // a min-heap by key; entries whose key no row holds are stale
  std::size_t queued_ = 0;    // rows with a queue_key
  std::uint64_t order_ = 0;
  std::uint64_t ids_version_ = 1;  // mu_
};

}  // namespace gossiptrain::gossip
