// The fitted answer deadline (see answer_deadline.hpp). The smoothing is TCP's (RFC 6298):
// srtt += (r - srtt) / 8, rttvar += (|r - srtt| - rttvar) / 4.
#include "gossip/exchange/answer_deadline.hpp"

#include <algorithm>
#include <cmath>

namespace gossiptrain::gossip {

AnswerDeadline::AnswerDeadline(net::Millis floor, net::Millis ceiling)
    : floor_(std::min(floor, ceiling)), ceiling_(ceiling) {}

void AnswerDeadline::record(double ms) {
  if (!(ms >= 0) || !std::isfinite(ms)) return;
  if (!measured_) {
    srtt_ = ms;
    rttvar_ = ms / 2;
    measured_ = true;
    return;
  }
  rttvar_ += (std::abs(ms - srtt_) - rttvar_) / 4;
  srtt_ += (ms - srtt_) / 8;
}

net::Millis AnswerDeadline::answer() const {
  if (!measured_) return ceiling_;
  const double ms = std::ceil(srtt_ + 4 * rttvar_);
  return std::clamp(net::Millis(static_cast<std::int64_t>(std::min(ms, 1e12))), floor_, ceiling_);
}

net::Millis AnswerDeadline::connect() const { return std::min(ceiling_, 2 * answer()); }

}  // namespace gossiptrain::gossip
