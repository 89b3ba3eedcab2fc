// What the two sides of catch-up share (catch_up.cpp, the server; catch_up_client.cpp, the
// fetcher): decoding with a logged failure, timers, and the transfer deadline.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "base/bytes.hpp"
#include "base/short_id.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip::catch_up_detail {

using net::Millis;
using base::short_id;

// Decodes b with decode; a malformed message (base::DecodeError) is logged and gives nullopt, and
// the caller closes the connection as a protocol violation.
template <typename Decode>
auto try_decode(const net::Bytes& b, Decode decode) -> std::optional<decltype(decode(b))> {
  try {
    return decode(b);
  } catch (const base::DecodeError& e) {
    spdlog::warn("catch-up: malformed message ({} bytes): {}", b.size(), e.what());
    return std::nullopt;
  }
}

// (Re)arms a timer: cancels the one it holds, then runs fn after d unless the owner is gone.
template <typename Fn>
void rearm(net::Scheduler& sched, net::Scheduler::TimerId& timer, Millis d,
           std::weak_ptr<bool> alive, Fn fn) {
  if (timer) sched.cancel(timer);
  timer = sched.schedule(d, [alive = std::move(alive), fn = std::move(fn)]() mutable {
    if (alive.lock()) fn();
  });
}

// Deadline of a transfer of `bytes`: a floor plus the time at the slowest rate we accept.
inline Millis transfer_deadline(Millis floor, double min_rate, std::uint64_t bytes) {
  return floor + Millis(static_cast<std::int64_t>(1000.0 * static_cast<double>(bytes) / min_rate));
}

}  // namespace gossiptrain::gossip::catch_up_detail
