// Keeping pace with the swarm (--max-ahead). Peers of one machine, or of unequal machines, train
// at unequal speeds; on skewed data a peer that runs ahead spends the end of its run, and the
// slowest peer the end of the swarm's, training alone on its own labels, and what it learns there
// is what every peer averages towards. Each exchange tells both sides the other's progress (the
// fraction of its training done), and so does every membership ping, ping-req and ack (its
// progress word), so a peer hears every member every few probe periods, however rarely it
// exchanges; a peer more than max_ahead ahead of the slowest partner it has heard from recently
// waits, serving exchanges, until it is not. A partner's word causes at most one wait: after a
// wait it counts again only once the partner speaks again, so peers that all hold old news of
// each other never stall one another.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

namespace gossiptrain::gossip {

struct PaceConfig {
  double max_ahead = 0.02;  // fraction of the run a peer may be ahead of the slowest partner
  // Partners further behind (restarted, catching up) are not waited for, unless two or more
  // are and none is nearer: then this peer is the one that ran ahead, and waits for their front.
  double ignore_behind = 0.10;
  double window_s = 10.0;  // what a partner said is forgotten after this long
};

// Thread-safe: partners are heard on the protocol thread, the training thread asks.
class PaceKeeper {
 public:
  explicit PaceKeeper(PaceConfig cfg) : cfg_(cfg) {}

  // A partner said it had done `progress` of its run (-1: not known, ignored) at now_s.
  void heard(const std::string& partner, double progress, double now_s);
  // Membership suspects partner, or declared it dead or gone: its last word causes no wait until
  // it speaks again (a partition's other side, extrapolated at its rate, held a peer 1.8 s).
  void unreachable(const std::string& partner);
  // Our own progress at a step boundary while training: the rate partners are extrapolated at.
  void trained(double progress, double now_s);
  // After a wait: the next rate sample starts here, so waiting never counts as slow training, and
  // every partner's word heard so far is spent.
  void resumed(double progress, double now_s);
  // How far we are ahead of the slowest partner heard within the window, not spent by a wait, not
  // finished and at most ignore_behind behind: its last word, moved on since at its own rate
  // (measured from its words) or ours, whichever is lower. 0 when none is behind. Where none is
  // that near but two or more are further behind, how far we are ahead of the front of those.
  double ahead(double own, double now_s) const;
  bool should_wait(double own, double now_s) const { return ahead(own, now_s) > cfg_.max_ahead; }
  double rate() const;  // our progress per second while training (0 until measured)

 private:
  // A rate of progress per second, averaged over samples at least 0.2 s long: ours from our step
  // boundaries, a partner's from its words.
  struct Rate {
    double rate = -1;                     // -1: no sample yet
    double from_progress = -1, from_s = 0;  // where the next sample starts (-1: nowhere yet)
    // Progress at now_s: closes a sample once 0.2 s long; progress that went back (a restore, a
    // restart) starts the next sample there instead.
    void add(double progress, double now_s);
    void restart(double progress, double now_s) {
      from_progress = progress;
      from_s = now_s;
    }
  };
  struct Heard {
    double progress = 0, at_s = 0;
    bool spent = false;  // a wait has been made on it
    Rate rate;           // the partner's own
  };
  PaceConfig cfg_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Heard> partners_;
  Rate own_;
};

}  // namespace gossiptrain::gossip
