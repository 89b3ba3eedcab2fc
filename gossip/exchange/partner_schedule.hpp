// The hypercube partner schedule (--partner-choice hypercube; docs/exchange.md, "Partner
// schedule"): every member, ranked by its place in the sorted list of live members, has ONE
// partner per round, and after schedule_length(n) rounds of pairwise averaging every member holds
// the exact average of what they held at the start:
//   n = p a power of two: log2(p) rounds, round k pairs rank a with a XOR 2^k, weight 1/2 (the
//     one-peer hypercube: after round k each block of 2^(k+1) ranks holds its own average);
//   n = p + q, 0 < q < p: log2(p) + 2 rounds. Round 0 folds each extra rank p + j into rank j
//     (weight 1/2: both hold their average, j now stands for two members); rounds 1..log2(p) run
//     the hypercube over ranks 0..p-1 with each side weighted by the members its block stands
//     for (both sides end on the same weighted mean, so each block holds the average of the
//     members it covers); the last round hands the result back to each extra rank (it takes its
//     partner's vector, weight 1; the partner keeps its own, weight 0).
// With weight 1/2 alone no schedule can average n members exactly unless n is a power of two (every
// product of such steps has entries k / 2^m, and the average needs 1/n), hence the weighted rounds.
// Pure functions of (n, rank, round): both sides of an exchange derive the same step from the
// member list they share, which the request names by its hash (ScheduleView::hash).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gossiptrain::gossip {

struct ScheduleStep {
  int partner = -1;   // its rank, or -1: no partner this round (the round is skipped)
  double w = 0.5;     // the weight of the partner's vector: x += w (r - x)
};

// Rounds after which n members hold the exact average (0 for n <= 1).
int schedule_length(int n);
// The step of rank in round (0 <= round < schedule_length(n)).
ScheduleStep schedule_step(int n, int rank, int round);

// The sorted live members (this peer included), their hash and this peer's rank.
struct ScheduleView {
  std::vector<std::string> ids;  // sorted
  std::uint64_t hash = 0;        // FNV-1a over the sorted ids, never 0
  int rank = -1;                 // of the local id
  int n() const { return static_cast<int>(ids.size()); }
  int rank_of(const std::string& id) const;  // -1 when not a member
};
ScheduleView make_view(std::vector<std::string> ids, const std::string& local_id);

}  // namespace gossiptrain::gossip
