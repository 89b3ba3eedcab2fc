// Apart from the swarm (--catch-up-behind). Robust mixing clips away a partner whose model is far
// from the others' (as it would a Byzantine peer's), so an honest peer that got far from the swarm
// cannot be averaged back:
// - a peer whose process was paused (SIGSTOP, a suspended VM, a long stall) comes back where it
//   stopped while the swarm trained on, and trains the rest of its run alone;
// - a peer on a slow link exchanges seldom, trains on its own between exchanges, and ends its run
//   far from the others.
// A joiner's catch-up can bring either back: the peer fetches a partner's whole state (parameters,
// optimizer state, counters) and goes on from there, as hivemind's peers load state from their
// peers when they find themselves epochs behind.
//
// The evidence is the exchanges themselves: each tells both sides the other's progress and the
// weight it mixed with (clip). Of the partners this peer completed an exchange with in the last
// window_s, at least min_partners, and more than half, must have clipped it under max_clip at a
// distance over min_distance: a slow peer that still averages, or one far partner (a Byzantine
// peer claiming to be done), is not enough. The distance matters at the end of a run: lingering
// peers settle to distances of 1e-4, where the bound, made of such distances, clips any exchange
// and a clip says nothing.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace gossiptrain::gossip {

struct BehindConfig {
  double behind = 0.1;      // fraction of the run a peer left behind is; 0: off
  double max_clip = 0.5;    // an exchange clipped under this did not bring the two together ...
  double min_distance = 0.01;  // ... unless they were this close (||r - s||; --linger-settle's D)
  double window_s = 10.0;   // exchanges older than this say nothing
  std::size_t min_partners = 2;
  double after_try_s = 30.0;  // after a catch-up (done or failed), not again for this long
};

// Thread-safe: exchanges are heard on the protocol thread, the training thread asks.
class BehindWatch {
 public:
  explicit BehindWatch(BehindConfig cfg) : cfg_(cfg) {}
  // An exchange with partner completed (ok) at now_s: its progress (negative: not known, the
  // exchange is ignored), the clip it was mixed with and the distance (||r - s||; negative: not
  // measured, taken as close).
  void exchanged(const std::string& partner, double partner_progress, double clip, double distance,
                 double now_s);
  // Training, at our progress `own` (negative: not known): the partners at least `behind` of the
  // run ahead that clip us away, the furthest ahead first, when they are enough to say we should
  // catch up; empty otherwise.
  std::vector<std::string> far_ahead(double own, double now_s) const;
  // Whether partners at least `behind` of the run behind our progress `own` clip us away, enough
  // of them as for far_ahead: this peer ran ahead of the swarm (trained alone, on a slow link)
  // rather than being left behind.
  bool ran_ahead(double own, double now_s) const;
  // Whether most partners heard recently clip us away, whatever their progress.
  bool apart(double now_s) const;
  // Whether partners at least `behind` of the run behind our progress `own`, clipping us or not,
  // are min_partners or more and most of those heard recently: we are done, the swarm is not.
  bool ahead_of_swarm(double own, double now_s) const;
  // Finished, and apart: the finished partners that clip us away, when they are enough (as
  // far_ahead) to take one's state; empty otherwise.
  std::vector<std::string> finished_apart(double now_s) const;
  // A catch-up was made (or tried) at now_s: what was heard is forgotten, and far_ahead and
  // finished_apart say nothing until quiet_s (negative: after_try_s) have passed.
  void tried(double now_s, double quiet_s = -1.0);

 private:
  struct Heard {
    double progress = 0, at_s = 0;
    bool clipped_away = false;
  };
  // Of the partners heard within the window, those at progress in [from, to] (and, with
  // clipped_only, that clipped us away), in order of progress (furthest first), when at least
  // min_partners and more than half of those heard; empty otherwise.
  std::vector<std::string> partners_in(double from, double to, bool clipped_only,
                                       double now_s) const;
  BehindConfig cfg_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Heard> heard_;
  double quiet_until_s_ = -1.0;
};

}  // namespace gossiptrain::gossip
