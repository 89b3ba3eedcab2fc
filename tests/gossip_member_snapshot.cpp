// The parts of membership other threads read: the member snapshot with its live list, and the
// transmit queue's order and retransmit limit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "gossip/broadcast_queue.hpp"
#include "gossip/member_snapshot.hpp"

using namespace gossiptrain::gossip;

namespace {
std::set<std::string> live_ids(const MemberSnapshot& s) {
  std::set<std::string> out;
  for (const auto& p : s.live()) out.insert(p.id);
  return out;
}
}  // namespace

TEST_CASE("member snapshot: the live list follows every change, never ourselves", "[gossip]") {
  MemberSnapshot s("me");
  s.reset({{"me", "10.0.0.1:1", 1, MemberState::Alive},
           {"a", "10.0.0.2:1", 1, MemberState::Alive},
           {"b", "10.0.0.3:1", 1, MemberState::Suspect},
           {"c", "10.0.0.4:1", 1, MemberState::Dead}});
  CHECK(live_ids(s) == std::set<std::string>{"a", "b"});
  s.set({"d", "10.0.0.5:1", 1, MemberState::Alive});
  s.set({"a", "10.0.0.2:1", 2, MemberState::Left});  // removed from the middle
  CHECK(live_ids(s) == std::set<std::string>{"b", "d"});
  s.set({"b", "10.0.0.9:1", 3, MemberState::Alive});  // moved: the list has its new address
  const auto live = s.live();
  auto b = std::find_if(live.begin(), live.end(), [](const PeerRef& p) { return p.id == "b"; });
  REQUIRE(b != live.end());
  CHECK(b->addr == "10.0.0.9:1");
  s.set({"c", "10.0.0.4:1", 4, MemberState::Alive});  // back from the dead
  CHECK(live_ids(s) == std::set<std::string>{"b", "c", "d"});
  CHECK(s.all().size() == 5);
  CHECK(s.find("a")->state == MemberState::Left);
  CHECK(!s.find("zz"));
  s.reset({{"me", "10.0.0.1:1", 1, MemberState::Alive}});
  CHECK(s.live().empty());
  CHECK(s.all().size() == 1);
}

TEST_CASE("broadcast queue: fresh news first, replaced per member, dropped after the limit",
          "[gossip]") {
  BroadcastQueue q;
  q.push({"a", "x:1", 1, MemberState::Alive, ""});
  q.push({"b", "x:2", 1, MemberState::Alive, ""});
  q.push({"a", "x:1", 2, MemberState::Suspect, "b"});  // replaces a's older update
  CHECK(q.size() == 2);
  auto first = q.take(1, 3);
  REQUIRE(first.size() == 1);
  CHECK(first[0].id == "a");  // the newest of the untransmitted
  CHECK(first[0].incarnation == 2);
  auto next = q.take(1, 3);
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == "b");  // never sent beats sent once
  for (int i = 0; i < 2; ++i) CHECK(q.take(2, 3).size() == 2);
  CHECK(q.empty());  // each went out 3 times
  q.push({"c", "x:3", 1, MemberState::Alive, ""});
  CHECK(q.take(0, 3).empty());
  CHECK(q.take(5, 1).size() == 1);
  CHECK(q.empty());
}
