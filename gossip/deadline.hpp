// One pending timer on the protocol thread's scheduler, written once: arming it again or
// cancelling it cancels the one before, and so does destroying it, so a moved-from or finished
// exchange leaves no timer behind. The callback still checks that its exchange is current (the
// scheduler may already have queued it), and calls fired() first.
#pragma once

#include <functional>
#include <utility>

#include "net/transport.hpp"

namespace gossiptrain::gossip {

class Deadline {
 public:
  Deadline() = default;
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  Deadline(Deadline&& o) noexcept : sched_(o.sched_), id_(std::exchange(o.id_, 0)) {}
  Deadline& operator=(Deadline&& o) noexcept {
    if (this != &o) {
      cancel();
      sched_ = o.sched_;
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  ~Deadline() { cancel(); }

  // Runs fn on s's thread after d, unless cancelled or armed again first.
  void arm(net::Scheduler& s, net::Millis d, std::function<void()> fn) {
    cancel();
    sched_ = &s;
    id_ = s.schedule(d, std::move(fn));
  }
  void cancel() {
    if (id_ && sched_) sched_->cancel(id_);
    id_ = 0;
  }
  // The callback is running: nothing left to cancel.
  void fired() { id_ = 0; }
  bool armed() const { return id_ != 0; }

 private:
  net::Scheduler* sched_ = nullptr;
  net::Scheduler::TimerId id_ = 0;
};

}  // namespace gossiptrain::gossip
