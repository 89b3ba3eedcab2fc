// Which live member an initiator asks (docs/exchange.md, "Partner choice"): uniformly at
// random, except that a partner whose recent exchanges took far longer than the others' (a slow
// or lossy link) is asked much less often, so that it does not keep this peer busy (and answering
// BUSY to everyone) for seconds at a time. Such a partner is still asked now and then, and it
// still starts exchanges of its own, so it is not cut off. A partner that did not answer at all
// (unreachable: across a partition, or gone) is backed off instead: not asked for a while as long
// as another candidate is not, so the next exchanges go to partners that can answer. Deterministic
// given the rng and the recorded durations and failures.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/rng.hpp"
#include "gossip/membership/peer_directory.hpp"

namespace gossiptrain::gossip {

// weighted: the draw below; uniform: every candidate alike; hypercube: the partner schedule of
// partner_schedule.hpp (a quiet swarm reaches the exact average in a bounded number of rounds),
// falling back to a weighted draw when the scheduled partner does not take part in time.
enum class PartnerMode { Weighted, Uniform, Hypercube };

struct PartnerChoiceConfig {
  PartnerMode mode = PartnerMode::Weighted;
  bool weighted() const { return mode != PartnerMode::Uniform; }
  bool scheduled() const { return mode == PartnerMode::Hypercube; }
  // hypercube: how long a peer waits at least (4 times the mean time between its exchanges when
  // that is longer) for its round's partner (asking it at each of its exchange
  // times; it is busy, or behind on the schedule) before it skips the round and averages with a
  // drawn partner instead; one such wait per round the partner has to serve first, restarted
  // while the partner answers (at most 16 times: exchange_protocol.cpp, restart_wait).
  double schedule_wait_ms = 2000;
  // hypercube: whether a peer waits on a scheduled partner that turns the exchange down (busy, or
  // behind on the schedule) so that each pass stays exact, as a swarm whose vectors change only
  // by averaging needs (gossip-sim's consensus workload). False (gossip-peer's default): the
  // exchange goes to a drawn partner at once. In training the vectors move with every step
  // between rounds, so no pass is exact, and each wait only lost an exchange: on 10 peers with two
  // labels each, 809 exchanges ok and 11,586 turned down, 49.89% against 81.92% without the
  // waits (docs/results/gossip.md). Under churn neither waits (exchange_protocol.hpp, churning).
  bool exact_passes = true;
  // A partner's cost is an exponential moving average of its exchange durations (ms), the newest
  // weighted alpha. Its weight is 1 up to slack times the median cost of the candidates, then
  // falls as (slack * median / cost)^2, never below min_weight.
  double alpha = 0.3;
  double slack = 3.0;
  double min_weight = 0.002;
  // An unreachable partner is not drawn for backoff_min ms, doubled with each further failure in
  // a row up to backoff_max; any answer from it, or a request of its own, ends the backoff. The
  // minimum is longer than the dial deadline a partner on a LAN gets (2 s, answer_deadline.hpp),
  // so an unreachable partner costs at most half of a peer's time at first, then less; with 1 s
  // a 4-peer partition test averaged 2 to 28 times per side in 8 s, with 2 s 126 to 264.
  double backoff_min_ms = 2000;
  double backoff_max_ms = 16000;
};

class PartnerChoice {
 public:
  using Millis = std::chrono::milliseconds;
  explicit PartnerChoice(PartnerChoiceConfig cfg = {});

  // An exchange with partner (either role) that took ms: finished, or failed once the transfer
  // had begun or by a timeout (a quick BUSY or refusal says nothing about the link).
  void record(const std::string& partner, double ms, Millis now);
  // An index into cands (not empty), drawn with the weights above.
  std::size_t pick(const std::vector<PeerRef>& cands, base::ProtocolRng& rng) const;
  // The weight of partner among candidates whose median cost is ref (1 when either is unknown).
  double weight(const std::string& partner, double ref) const;
  // The recorded cost of partner in ms, or -1.
  double cost(const std::string& partner) const;
  // partner did not answer (its dial failed or timed out, a request or a transfer got no
  // answer): backed off from now. answered: it answered (any message, any exchange): not.
  void unreachable(const std::string& partner, Millis now);
  void answered(const std::string& partner) { backoff_.erase(partner); }
  bool backed_off(const std::string& partner, Millis now) const;

 private:
  struct Cost {
    double ms = 0;
    Millis last{0};
  };
  PartnerChoiceConfig cfg_;
  std::unordered_map<std::string, Cost> costs_;  // at most kMaxPartners
  struct Backoff {
    int failures = 0;  // in a row
    Millis until{0};
  };
  std::unordered_map<std::string, Backoff> backoff_;  // at most kMaxPartners
};

}  // namespace gossiptrain::gossip
