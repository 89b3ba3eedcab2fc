// The adaptive bound of robust mixing (docs/robustness.md, "Robust mixing, refusals and bans"):
// which tau a measured ||r - s|| is clipped to, and whether the exchange is refused as anomalous.
// Pure bookkeeping, no network and no vectors: the averager measures the norms and asks.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gossiptrain::gossip {

// How the partner's vector is mixed in. Plain: x += w (r - s). Clipped (ClippedGossip, He,
// Karimireddy and Jaggi 2022): x += w c (r - s), c = min(1, tau / ||r - s||), where tau adapts to
// the differences this peer has accepted (see RobustConfig); gossip-peer's default.
enum class MixMode { Plain, Clipped };

struct RobustConfig {
  MixMode mix = MixMode::Plain;  // the library's default; gossip-peer defaults to clipped
  // B is the median over the partners of the last clip_window applied exchanges of each one's
  // latest ||r - s||: one figure per partner, so a pair that exchanges many times does not fill
  // the window with its own distance, and a minority of far partners cannot move it, however far
  // they are (a window of fewer than three partners reaches one window further back). tau =
  // clip_mult times the same median over a steadier figure per partner, the larger of its latest
  // ||r - s|| and its median in the window. For the first clip_warmup applied exchanges,
  // tau = warmup_frac * ||s|| (our own snapshot's norm), and a difference beyond ||s|| itself is
  // refused.
  double clip_mult = 3.0;
  int clip_window = 32;
  int clip_warmup = 8;
  double warmup_frac = 0.25;
  // An exchange whose ||r - s|| exceeds refuse_mult * tau and our own ||s|| is refused
  // ("anomalous"); one within either is clipped.
  double refuse_mult = 10.0;
  // A partner that is far persistently: the median of its last suspect_window ||r - s|| (at
  // least suspect_min of them, none older than suspect_age) above suspect_mult times the median
  // of the same figure over the partners of B's window (at least B) is refused, once its
  // ||r - s|| is also beyond suspect_floor * ||s||. 0: off.
  double suspect_mult = 2.5;
  double suspect_floor = 0.05;
  // What happens to such a partner: refused (counts towards a ban), or clipped to B (a third of
  // the usual tau) and mixed, so that an honest peer that is far for a while (restarted from an
  // older checkpoint, behind a slow link) still comes closer while an attacker's pull is cut.
  bool suspect_clip = false;
  // With suspect_clip: each further exchange in a row judged suspect multiplies the clip by this
  // (B, then B * decay, B * decay^2, ...), so a partner that never comes closer (stale) ends up
  // mixed in with a vanishing weight: its whole pull on this peer is at most B / (1 - decay) per
  // streak, while an honest peer that comes closer leaves suspicion and the streak ends. 1: B
  // every time (the earlier rule).
  double suspect_decay = 0.5;
  // Honest drift: two peers that each clipped the other in one exchange (both votes' tau below
  // the agreed ||r - s||: a healed partition, a slower peer) mix with at least suspect_min_clip of
  // the plain weight (the agreed clip, exchange_protocol.cpp), so they keep coming closer; a stale
  // vector finds every peer equally far, clips none, and fades out as before. A progress-gap
  // partner's own tau is floored the same (at least suspect_min_clip * min(||r - s||, ||s||)). A
  // partner whose ||r - s|| fell below recover_frac times its ||r - s|| at the start of its
  // streak came closer: the streak starts again (clip back to B).
  double suspect_min_clip = 0.02;
  double recover_frac = 0.9;
  // A replay: a partner whose payload was the same as its last one replay_repeats times in a row
  // (heard_payload) sends a vector that does not move, however we mix with it; an honest peer's
  // moves with every training step and every averaging (a stale vector, --fault stale). It gives
  // no figure to B while another partner does, and its clip as a suspect has no floor (it
  // fades): honest peers that settled and exchange once every 2 s left a window of two
  // partners, B was the upper figure, the replayed one, and every honest peer mixed it at full
  // weight. 0: off.
  int replay_repeats = 2;
  // Progress gap: the partner's step count (told in its REQUEST or ACCEPT, heard_step) and ours
  // differ by at least gap_min_steps, and the smaller is below gap_ratio times the larger (a
  // joiner from scratch, a peer restarted from an old checkpoint, a much slower peer). Its
  // distance, up to refuse_mult times our own ||s||, is explained by the gap: never refused for it
  // (warm-up, far, persistent), never banned for it; mixed with the suspect clip above (decaying
  // from tau, floored) instead. A vector beyond that is judged as any other.
  double gap_ratio = 0.5;
  std::int64_t gap_min_steps = 64;
  int suspect_window = 5;
  int suspect_min = 3;
  std::chrono::milliseconds suspect_age{60000};
  // A partner whose vector we refused (anomalous, invalid:*) ban_after times within ban_window is
  // banned for ban_base, doubled for each later ban of it (at most ban_max). 0: never ban.
  int ban_after = 3;
  std::chrono::milliseconds ban_window{120000};
  std::chrono::milliseconds ban_base{30000};
  std::chrono::milliseconds ban_max{3600000};
};

// Throws std::invalid_argument naming the first bad field.
void validate(const RobustConfig& rc);

// Thread-safe (its own mutex): the norm is judged on the protocol thread or, on the copy path, on
// the training thread, and accepted norms arrive from the training thread.
class RobustBound {
 public:
  using Millis = std::chrono::milliseconds;
  explicit RobustBound(RobustConfig cfg);

  struct Judgement {
    double tau = 0;        // the bound this side votes for (> 0)
    std::string why;       // "" accepted; else why it is refused: "far", "warm-up", "persistent"
    double ratio = -1;     // ||r - s|| / B (-1 in the warm-up)
    double typical = -1;   // the partner's median ||r - s|| over B, once it has suspect_min
    bool suspect = false;  // far persistently, clipped (suspect_clip) instead of refused
    int streak = 0;        // with suspect: exchanges in a row this partner was judged suspect
    bool gap = false;      // with suspect: a progress gap explains the distance (not refused)
    bool floored = false;  // with suspect: tau is the honest-drift floor, not B * decay^k
    bool odd = false;      // with suspect: in the warm-up every partner was far; we may be the odd one
    bool replay = false;   // with suspect: its vector is the same as its last ones (replay_repeats)
    // A refusal counts towards a ban (ban_after), except the warm-up's while our norm says
    // nothing yet (norm_says_nothing_locked).
    bool bans = true;
  };
  // ||r - s|| = norm measured against our snapshot, from partner, at now. own_norm() gives our
  // snapshot's ||s|| (a pass over it): asked for only in the warm-up or when a rule needs it.
  Judgement judge(const std::string& partner, double norm, const std::function<double()>& own_norm,
                  Millis now);
  // An exchange with partner was applied: its ||r - s|| becomes that partner's figure in B's
  // window (suspect exchanges too: one partner's figure cannot move the median).
  void accepted(const std::string& partner, double norm);
  // Progress, in optimizer steps: ours (training thread, every step boundary) and a partner's as
  // it told us (protocol thread, before its vector is judged).
  void set_own_step(std::int64_t step);
  // Our parameters' norm before our first steps (the first call counts): the warm-up's bound is
  // our own norm, which says something of a partner only once it is mostly the shared start.
  void set_initial_norm(double norm);
  // A sample of the partner's payload bytes (payload_sample with its wire), before its vector
  // is judged.
  void heard_payload(const std::string& partner, std::uint64_t hash);
  void heard_step(const std::string& partner, std::int64_t step, Millis now);
  // B (none during the warm-up).
  std::optional<double> baseline() const;
  std::size_t partners() const;

 private:
  struct Partner {
    std::deque<std::pair<Millis, double>> norms;  // its last ||r - s||, at most suspect_window
    Millis last{0};
    int suspect_streak = 0;  // judged suspect in a row (suspect_clip)
    double streak_norm = 0;  // ||r - s|| at the start of the streak (recover_frac)
    std::int64_t step = -1;  // its step count as it last told us; -1: not known
    bool warm_far = false;   // judged beyond our own norm in the warm-up
    std::uint64_t payload = 0;  // its last payload's sample (heard_payload)
    bool has_payload = false;
    int repeats = 0;            // payloads in a row equal to the one before
  };
  bool odd_one_out_locked() const;
  // In our first gap_min_steps steps our norm has more than doubled since the start: it is mostly
  // our own first moves (weights that start at or near zero, a NumPy script's sub-millisecond
  // steps at a large rate), and honest peers on other shards are beyond it from their first steps.
  // The warm-up still refuses them, but a refusal that says so little bans nobody.
  bool norm_says_nothing_locked(double own) const;
  bool progress_gap(const Partner& p) const;
  bool replaying(const std::string& id) const;
  // Clips partner p as suspect, from base (B, or the warm-up tau) decaying with its streak.
  // floor_on: keep the clip at suspect_min_clip (a progress gap, or too few partners to compare).
  void suspect(Judgement& j, Partner& p, double base, double norm, bool gap,
               const std::function<double()>& own, bool floor_on);
  // B of the latest readings, and the median of the steadier figures that tau is taken from.
  struct Baselines {
    double b = 0, steady = 0;
  };
  // None during the warm-up.
  std::optional<Baselines> baseline_locked() const;
  // The partner's median ||r - s|| over its recent records; none with fewer than suspect_min.
  std::optional<double> typical(const Partner& p, Millis now) const;
  // The median of the typical figures of the partners in B's window; none with fewer than three
  // partners that have one (then a partner is compared with B, and nothing says it is the odd
  // one out).
  std::optional<double> typical_over_partners(Millis now) const;
  // The partners of the last clip_window applied exchanges (reaching one window further back
  // for three), each with its figures.
  struct WindowFigure {
    const std::string* id;
    double latest;  // its latest ||r - s||
    double steady;  // the larger of that and its median in the window
  };
  std::vector<WindowFigure> window_partners() const;
  void forget_stale(Millis now);

  RobustConfig cfg_;
  mutable std::mutex mu_;
  std::deque<std::pair<std::string, double>> hist_;  // (partner, ||r - s||): the last 2 clip_window applied
  std::uint64_t accepted_ = 0;
  std::int64_t own_step_ = -1;
  double initial_norm_ = -1;  // set_initial_norm; -1: not known
  bool warm_near_ = false;  // a partner within our own norm in the warm-up
  std::unordered_map<std::string, Partner> partners_;  // bounded: see forget_stale
};

}  // namespace gossiptrain::gossip
