// Membership's member table: interned names, the rows and their live list (what other threads
// read), and the transmit queue's order and retransmit limit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "gossip/membership/member_table.hpp"

using namespace gossiptrain::gossip;
using Millis = std::chrono::milliseconds;

namespace {
std::set<std::string> live_ids(const MemberTable& t) {
  std::set<std::string> out;
  for (const auto& p : t.live_peers()) out.insert(p.id);
  return out;
}

struct Fixture {
  std::shared_ptr<MemberNames> names = std::make_shared<MemberNames>();
  MemberTable t{names, "me", "10.0.0.1:1", 1, Millis(0)};
  const MemberTable::Row& add(const std::string& id, const std::string& addr,
                              MemberState s = MemberState::Alive) {
    const auto& r = t.add(names->ids.intern(id), names->addrs.intern(addr), 1, Millis(0));
    t.modify(r, [s](MemberTable::Row& m) { m.state = s; });
    return r;
  }
  void set(const std::string& id, MemberState s) {
    t.modify(*t.find(id), [s](MemberTable::Row& m) { m.state = s; });
  }
};
}  // namespace

TEST_CASE("name table: one number per distinct string, stable, shared", "[gossip]") {
  NameTable n;
  const NameId a = n.intern("alpha");
  const NameId b = n.intern("beta");
  CHECK(a != b);
  CHECK(n.intern("alpha") == a);
  CHECK(n.find("beta") == b);
  CHECK(!n.find("gamma"));
  const std::string& ref = n.name(a);
  for (int i = 0; i < 10000; ++i) n.intern("name-" + std::to_string(i));  // the deque grows
  CHECK(ref == "alpha");                                                  // references stay valid
  CHECK(&n.name(a) == &ref);
  CHECK(n.size() == 10002);
}

TEST_CASE("member table: the live list follows every change, never ourselves", "[gossip]") {
  Fixture f;
  f.add("a", "10.0.0.2:1");
  f.add("b", "10.0.0.3:1", MemberState::Suspect);
  f.add("c", "10.0.0.4:1", MemberState::Dead);
  CHECK(live_ids(f.t) == std::set<std::string>{"a", "b"});
  CHECK(f.t.live_count() == 2);
  CHECK(f.t.live_members() == 3);  // ourselves included
  f.add("d", "10.0.0.5:1");
  f.set("a", MemberState::Left);  // off the list from its middle
  CHECK(live_ids(f.t) == std::set<std::string>{"b", "d"});
  const NameId moved = f.names->addrs.intern("10.0.0.9:1");
  f.t.modify(*f.t.find("b"), [&](MemberTable::Row& m) {
    m.addr = moved;
    m.state = MemberState::Alive;
  });
  const auto live = f.t.live_peers();
  auto b = std::find_if(live.begin(), live.end(), [](const PeerRef& p) { return p.id == "b"; });
  REQUIRE(b != live.end());
  CHECK(b->addr == "10.0.0.9:1");
  f.set("c", MemberState::Alive);  // back from the dead
  CHECK(live_ids(f.t) == std::set<std::string>{"b", "c", "d"});
  const auto all = f.t.all();
  REQUIRE(all.size() == 5);
  CHECK(std::is_sorted(all.begin(), all.end(),
                       [](const MemberInfo& x, const MemberInfo& y) { return x.id < y.id; }));
  CHECK(f.t.info("a")->state == MemberState::Left);
  CHECK(!f.t.info("zz"));

  // Removing a member moves the last row into its slot: lookups and the live list stay right.
  f.t.remove(f.t.find("a")->id);
  f.t.remove(f.t.find("b")->id);
  CHECK(!f.t.find("a"));
  CHECK(!f.t.find("b"));
  CHECK(f.t.find("d")->state == MemberState::Alive);
  CHECK(live_ids(f.t) == std::set<std::string>{"c", "d"});
  CHECK(f.t.size() == 3);
  f.set("me", MemberState::Left);
  CHECK(f.t.live_members() == 2);
  CHECK(f.t.self().id == f.t.self_id());
}

TEST_CASE("member table: the schedule's member list keeps dead members, and its version moves "
          "only when a member is added or removed",
          "[gossip]") {
  Fixture f;
  const auto v0 = f.t.ids_version();
  f.add("a", "10.0.0.2:1");
  f.add("b", "10.0.0.3:1", MemberState::Dead);
  const auto v1 = f.t.ids_version();
  CHECK(v1 != v0);
  auto ids = f.t.ids();
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::string>{"a", "b"});  // the dead one too, never ourselves
  CHECK(f.t.live_ref("a").value().addr == "10.0.0.2:1");
  CHECK(!f.t.live_ref("b"));   // dead: its rounds are skipped
  CHECK(!f.t.live_ref("me"));  // ourselves
  CHECK(!f.t.live_ref("zz"));
  // A crash and a restart change states, not the list: the schedule is not reshuffled.
  f.set("a", MemberState::Dead);
  f.set("b", MemberState::Alive);
  CHECK(f.t.ids_version() == v1);
  CHECK(f.t.live_ref("b"));
  f.t.remove(*f.names->ids.find("a"));  // reaped
  CHECK(f.t.ids_version() != v1);
  CHECK(f.t.ids() == std::vector<std::string>{"b"});
}

TEST_CASE("member table: live_sample draws distinct live members, all of few", "[gossip]") {
  Fixture f;
  for (int i = 0; i < 200; ++i)
    f.add("p" + std::to_string(i), "10.0.1." + std::to_string(i) + ":1",
          i % 4 == 3 ? MemberState::Dead : MemberState::Alive);
  gossiptrain::base::ProtocolRng rng(7);
  std::set<std::string> seen;
  for (int round = 0; round < 200; ++round) {
    const auto s = f.t.live_sample(8, rng);
    REQUIRE(s.size() == 8);
    std::set<std::string> ids;
    for (const auto& p : s) {
      ids.insert(p.id);
      CHECK(f.t.find(p.id)->state == MemberState::Alive);
    }
    CHECK(ids.size() == 8);
    seen.insert(ids.begin(), ids.end());
  }
  CHECK(seen.size() == 150);  // 1600 draws reach every one of the 150 live members
  CHECK(f.t.live_sample(1000, rng).size() == 150);
}

TEST_CASE("member table: readers on another thread see a consistent table while it changes",
          "[gossip]") {
  Fixture f;
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> reads{0};
  std::atomic<bool> consistent{true};
  std::thread reader([&] {
    while (!stop) {
      const auto live = f.t.live_peers();
      for (const auto& p : live)
        if (p.addr != "10.0.2.1:1") consistent = false;
      ++reads;
    }
  });
  while (reads == 0) std::this_thread::yield();
  for (int i = 0; i < 3000; ++i) {
    f.add("q" + std::to_string(i), "10.0.2.1:1");
    if (i % 3 == 0) f.set("q" + std::to_string(i / 2), MemberState::Dead);
  }
  const std::size_t before = reads;
  while (reads < before + 2) std::this_thread::yield();  // at least one read of the final table
  stop = true;
  reader.join();
  CHECK(consistent);
  CHECK(f.t.live_count() == 2000);
}

TEST_CASE("transmit queue: fresh news first, replaced per member, dropped after the limit",
          "[gossip]") {
  Fixture f;
  const auto& a = f.add("a", "x:1");
  const NameId b_id = f.add("b", "x:2").id;
  const NameId from = f.names->ids.find("b").value();
  f.t.queue(*f.t.find("a"), MemberState::Alive, 1, kNoName);
  f.t.queue(*f.t.find(b_id), MemberState::Alive, 1, kNoName);
  f.t.queue(a, MemberState::Suspect, 2, from);  // replaces a's older update
  CHECK(f.t.queued() == 2);
  auto first = f.t.take(1, 3);
  REQUIRE(first.size() == 1);
  CHECK(first[0] == Update{"a", "x:1", 2, MemberState::Suspect, "b"});  // newest untransmitted
  auto next = f.t.take(1, 3);
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == "b");  // never sent beats sent once
  CHECK(next[0].from.empty());
  for (int i = 0; i < 2; ++i) CHECK(f.t.take(2, 3).size() == 2);
  CHECK(f.t.queue_empty());  // each went out 3 times
  f.add("c", "x:3");
  f.t.queue(*f.t.find("c"), MemberState::Alive, 1, kNoName);
  CHECK(f.t.take(0, 3).empty());
  CHECK(f.t.take(5, 1).size() == 1);
  CHECK(f.t.queue_empty());

  // A limit that shrank below what an update has had: it leaves without going out again.
  f.t.queue(*f.t.find("c"), MemberState::Alive, 2, kNoName);
  CHECK(f.t.take(1, 5).size() == 1);
  CHECK(f.t.take(1, 5).size() == 1);
  CHECK(f.t.take(5, 2).empty());
  CHECK(f.t.queue_empty());

  // A removed member's queued update goes with it.
  f.t.queue(*f.t.find("c"), MemberState::Dead, 2, from);
  f.t.remove(f.t.find("c")->id);
  CHECK(f.t.queue_empty());
  CHECK(f.t.take(5, 3).empty());
}

TEST_CASE("transmit queue: failure-detector news goes before any join news", "[gossip]") {
  // A join storm: news of 50 new members queued, fresher than a refutation already sent once.
  Fixture f;
  const auto& r = f.add("refuter", "x:0");
  f.t.queue(r, MemberState::Alive, 7, kNoName);
  REQUIRE(f.t.take(1, 5).size() == 1);
  for (int i = 0; i < 50; ++i) {
    const auto& j = f.add("joiner" + std::to_string(i), "y:" + std::to_string(i));
    f.t.queue(j, MemberState::Alive, 1, kNoName, MemberTable::News::Join);
  }
  // The refutation, sent once, still goes out first, until its limit; then the joins, newest first.
  for (int sent = 1; sent < 5; ++sent) {
    const auto ups = f.t.take(1, 5);
    REQUIRE(ups.size() == 1);
    CHECK(ups[0].id == "refuter");
  }
  const auto ups = f.t.take(2, 5);
  REQUIRE(ups.size() == 2);
  CHECK(ups[0].id == "joiner49");
  CHECK(ups[1].id == "joiner48");
  // A join's news replaced by a suspicion is failure news from then on.
  f.t.queue(*f.t.find("joiner3"), MemberState::Suspect, 1, kNoName);
  CHECK(f.t.take(1, 5)[0].id == "joiner3");
}

TEST_CASE("member table: a partition is suspected from two or more dead members, a third of those known",
          "[gossip]") {
  auto members = [](int alive, int dead, int left) {
    std::vector<MemberInfo> m;
    for (int i = 0; i < alive; ++i) m.push_back({"a" + std::to_string(i), "", 1, MemberState::Alive});
    for (int i = 0; i < dead; ++i) m.push_back({"d" + std::to_string(i), "", 1, MemberState::Dead});
    for (int i = 0; i < left; ++i) m.push_back({"l" + std::to_string(i), "", 1, MemberState::Left});
    return m;
  };
  // A 4|4 split seen from one side (ourselves among the four alive).
  DeadCount c = count_dead(members(4, 4, 0));
  CHECK(c.dead == 4);
  CHECK(c.known == 8);
  CHECK(c.partition_suspected());
  CHECK(count_dead(members(2, 2, 0)).partition_suspected());  // 2|2
  // One crash is not a partition, however small the swarm.
  CHECK_FALSE(count_dead(members(2, 1, 0)).partition_suspected());
  // Two crashed of eight: under a third.
  CHECK_FALSE(count_dead(members(6, 2, 0)).partition_suspected());
  // Peers that finished and left do not count, neither as dead nor as known.
  c = count_dead(members(1, 0, 7));
  CHECK(c.dead == 0);
  CHECK(c.known == 1);
  CHECK_FALSE(c.partition_suspected());
  CHECK(count_dead(members(2, 2, 4)).partition_suspected());
  // Suspects are alive until declared dead, but they make a partition possible: the lingering
  // peer waits for the suspicion to end either way.
  auto m = members(4, 0, 0);
  m[1].state = m[2].state = MemberState::Suspect;
  c = count_dead(m);
  CHECK(c.suspect == 2);
  CHECK_FALSE(c.partition_suspected());
  CHECK(c.partition_possible());
  m[2].state = MemberState::Alive;
  CHECK_FALSE(count_dead(m).partition_possible());  // one silent member is one crash at most
  m[2].state = MemberState::Dead;
  CHECK(count_dead(m).partition_possible());  // one dead and one suspected
  CHECK_FALSE(count_dead(m).partition_suspected());
  // Six alive, two silent of eight: under a third.
  auto e = members(6, 1, 0);
  e[0].state = MemberState::Suspect;
  CHECK_FALSE(count_dead(e).partition_possible());
}
