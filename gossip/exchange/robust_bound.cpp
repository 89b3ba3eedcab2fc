#include "gossip/exchange/robust_bound.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "base/stats.hpp"

namespace gossiptrain::gossip {

using base::median;

namespace {

constexpr std::size_t kMaxPartners = 4096;

bool finite_pos(double x) { return x > 0 && std::isfinite(x); }

}  // namespace

void validate(const RobustConfig& rc) {
  auto bad = [](const char* what) {
    throw std::invalid_argument(std::string("robust mixing: bad ") + what);
  };
  if (!finite_pos(rc.clip_mult)) bad("clip_mult");
  if (rc.clip_window < 1) bad("clip_window");
  if (rc.clip_warmup < 0) bad("clip_warmup");
  if (!finite_pos(rc.warmup_frac) || rc.warmup_frac > 1) bad("warmup_frac");
  if (!(rc.refuse_mult >= 1) || !std::isfinite(rc.refuse_mult)) bad("refuse_mult");
  if (!(rc.suspect_mult >= 0) || !std::isfinite(rc.suspect_mult)) bad("suspect_mult");
  if (!(rc.suspect_floor >= 0) || !std::isfinite(rc.suspect_floor)) bad("suspect_floor");
  if (rc.suspect_window < 1 || rc.suspect_min < 1 || rc.suspect_min > rc.suspect_window)
    bad("suspect_window/suspect_min");
  if (rc.suspect_age.count() <= 0) bad("suspect_age");
  if (!(rc.suspect_decay > 0 && rc.suspect_decay <= 1)) bad("suspect_decay");
  if (!(rc.suspect_min_clip >= 0 && rc.suspect_min_clip <= 1)) bad("suspect_min_clip");
  if (!(rc.recover_frac >= 0 && rc.recover_frac <= 1)) bad("recover_frac");
  if (rc.replay_repeats < 0) bad("replay_repeats");
  if (!(rc.gap_ratio >= 0 && rc.gap_ratio <= 1) || rc.gap_min_steps < 0) bad("gap parameters");
  if (rc.ban_after < 0 || rc.ban_window.count() < 0 || rc.ban_base.count() < 0 ||
      rc.ban_max < rc.ban_base)
    bad("ban parameters");
}

RobustBound::RobustBound(RobustConfig cfg) : cfg_(std::move(cfg)) { validate(cfg_); }

// Newest first, so each partner's first appearance is its latest figure; its other figures in
// the window follow. The window is the last clip_window applied exchanges; where it holds fewer
// than three partners (one partner that floods us with requests fills it), it reaches back at
// most one more clip_window for more, so that one partner's figure is not B by itself. Not
// further back: the partners we met before a partition are not the ones we can reach now (the
// 2|2 heal of tests/gossip_partition.cpp fails with 512 exchanges of reach).
// O(window^2) string compares: cheaper than the vectors an exchange measures.
std::vector<RobustBound::WindowFigure> RobustBound::window_partners() const {
  struct Seen {
    const std::string* id;
    std::vector<double> norms;  // newest first: the latest, then the others within the window
  };
  std::vector<Seen> seen;
  std::size_t moving = 0;  // partners seen that are not replaying
  auto add = [&](const std::pair<std::string, double>& h, bool in_window) {
    auto e = std::find_if(seen.begin(), seen.end(), [&](const Seen& x) { return *x.id == h.first; });
    if (e == seen.end()) {
      seen.push_back({&h.first, {h.second}});
      moving += replaying(h.first) ? 0 : 1;
    } else if (in_window) e->norms.push_back(h.second);
  };
  const std::size_t window = std::min(hist_.size(), std::size_t(cfg_.clip_window));
  auto it = hist_.rbegin();
  for (std::size_t k = 0; k < window; ++it, ++k) add(*it, true);
  // Fewer than three partners in the window: reach back (at most one more window) for more.
  for (; it != hist_.rend() && moving < 3; ++it) add(*it, false);  // hist_: 2 windows
  // A replayed vector says nothing of how far honest peers are (replay_repeats).
  if (moving > 0)
    seen.erase(std::remove_if(seen.begin(), seen.end(),
                              [&](const Seen& x) { return replaying(*x.id); }),
               seen.end());
  std::vector<WindowFigure> out;
  out.reserve(seen.size());
  for (auto& x : seen) {
    const double latest = x.norms.front();
    out.push_back({x.id, latest, std::max(latest, median(std::move(x.norms)))});
  }
  return out;
}

// One figure per partner. Two peers that barely move (finished, or at the end of a decayed
// learning rate) exchange many times a second at distance 0 while their other partners are busy
// training; with a figure per exchange their zeros filled the window and B collapsed, and the
// partners of the last exchanges are the ones we can reach: after a partition heals, the other
// side's figures replace the ones from before it as soon as we meet them (docs/robustness.md,
// "Cliques at the end of a partition"). The figure is the larger of the partner's latest
// ||r - s|| and its median in the window: a distance that jumps (a heal) raises it at once, and
// one reading taken just after the pair averaged (~0) does not drop it, which clipped single
// honest exchanges to 0.43-0.49 late in training (docs/robustness.md, "A transfer held across
// the split").
std::optional<RobustBound::Baselines> RobustBound::baseline_locked() const {
  if (accepted_ < std::uint64_t(cfg_.clip_warmup) || hist_.empty()) return std::nullopt;
  std::vector<double> latest, steady;
  for (const WindowFigure& f : window_partners()) {
    latest.push_back(f.latest);
    steady.push_back(f.steady);
  }
  return Baselines{std::max(median(std::move(latest)), 1e-30),
                   std::max(median(std::move(steady)), 1e-30)};
}

std::optional<double> RobustBound::baseline() const {
  std::lock_guard<std::mutex> lk(mu_);
  const auto b = baseline_locked();
  return b ? std::optional<double>(b->b) : std::nullopt;
}

std::size_t RobustBound::partners() const {
  std::lock_guard<std::mutex> lk(mu_);
  return partners_.size();
}

std::optional<double> RobustBound::typical(const Partner& p, Millis now) const {
  std::vector<double> r;
  for (const auto& [t, norm] : p.norms)
    if (t + cfg_.suspect_age >= now) r.push_back(norm);
  if (r.size() < std::size_t(cfg_.suspect_min)) return std::nullopt;
  return median(std::move(r));
}

// The partners we meet now: those of B's window, not every partner of the last minute (during a
// partition the other side's old figures made the one partner we could still reach the odd one
// out).
std::optional<double> RobustBound::typical_over_partners(Millis now) const {
  std::vector<double> all;
  for (const WindowFigure& f : window_partners()) {
    const auto it = partners_.find(*f.id);
    if (it == partners_.end()) continue;
    if (auto t = typical(it->second, now)) all.push_back(*t);
  }
  if (all.size() < 3) return std::nullopt;
  return median(std::move(all));
}

void RobustBound::forget_stale(Millis now) {
  if (partners_.size() < kMaxPartners) return;
  for (auto it = partners_.begin(); it != partners_.end();)
    if (it->second.last + cfg_.suspect_age < now) it = partners_.erase(it);
    else ++it;
  // All recent (more partners than kMaxPartners within suspect_age): drop the oldest.
  while (partners_.size() >= kMaxPartners) {
    auto oldest = std::min_element(partners_.begin(), partners_.end(),
                                   [](auto& a, auto& b) { return a.second.last < b.second.last; });
    partners_.erase(oldest);
  }
}

// Warm-up (no B yet): tau is a quarter of our own norm, and a difference beyond our own norm is
// refused: early in training honest peers differ by a few percent of ||s|| (same initial weights),
// while a sign-flipped vector is about 2 ||s|| away. Unless every partner so far was that far
// (odd_one_out_locked): then, within refuse_mult * ||s||, it is clipped as a suspect, floored. After it, three refusal rules:
// - far: beyond refuse_mult * tau and beyond ||s|| (scale:K, random, divergence);
// - persistent: this partner's typical ||r - s|| is suspect_mult times that of the partners we
//   meet (and of B), and ||r - s|| is beyond suspect_floor * ||s||. An attacker that stays just
//   under tau (signflip, stale) pulls the same way every time; honest partners come closer with
//   every exchange, so their distance does not stay high. The floor keeps the end of training safe,
//   where B collapses as the peers that finished converge and a straggler is many B away while
//   still a tiny fraction of ||s||.
// A partner with a progress gap (progress_gap) within refuse_mult * ||s|| is never refused by these
// rules: its distance is explained by the gap (a joiner from scratch, far behind the swarm, is a
// few ||s|| away); it is clipped as a suspect. Beyond that, the rules above apply.
RobustBound::Judgement RobustBound::judge(const std::string& partner, double norm,
                                          const std::function<double()>& own_norm, Millis now) {
  double own = -1;
  auto get_own = [&] { return own >= 0 ? own : (own = own_norm()); };
  Judgement j;
  std::lock_guard<std::mutex> lk(mu_);
  forget_stale(now);
  Partner& p = partners_[partner];
  p.last = now;
  // A gap explains a distance of a few ||s|| (random weights against trained ones), not more.
  const bool gap = progress_gap(p) && norm <= cfg_.refuse_mult * get_own();
  const std::optional<Baselines> bs = baseline_locked();
  const std::optional<double> b = bs ? std::optional<double>(bs->b) : std::nullopt;
  if (!b) {
    j.tau = std::max(cfg_.warmup_frac * get_own(), 1e-12);  // never 0: that would refuse all
    if (!(norm <= get_own())) {
      p.warm_far = true;
      if (gap) suspect(j, p, j.tau, norm, true, get_own, true);
      else if (odd_one_out_locked() && norm <= cfg_.refuse_mult * get_own()) {
        j.odd = true;
        suspect(j, p, j.tau, norm, false, get_own, true);
      } else {
        j.why = "warm-up";
        j.bans = !norm_says_nothing_locked(get_own());
      }
      return j;
    }
    warm_near_ = true;
    p.suspect_streak = 0;
    return j;
  }
  j.tau = std::max(cfg_.clip_mult * bs->steady, 1e-12);
  j.ratio = norm / *b;
  p.norms.emplace_back(now, std::isfinite(norm) ? norm : 1e300);
  while (p.norms.size() > std::size_t(cfg_.suspect_window)) p.norms.pop_front();
  if (!(norm <= cfg_.refuse_mult * cfg_.clip_mult * *b) && !(norm <= get_own())) {
    if (gap) suspect(j, p, *b, norm, true, get_own, true);
    else j.why = "far";
    return j;
  }
  if (auto t = typical(p, now)) {
    j.typical = *t / *b;
    // With fewer than three partners to compare (a swarm of three), a partner far from us is
    // not shown to be the odd one out: we may be. There its clip keeps the floor, so that an
    // honest peer that started a moment late is not clipped to nothing while the two others,
    // close to each other, find it persistently far (and it finds them equally far, so the
    // suspicion is not mutual): it failed the three-host test in about 1 run of 6.
    const std::optional<double> over = typical_over_partners(now);
    if (cfg_.suspect_mult > 0 && *t > cfg_.suspect_mult * std::max(*b, over.value_or(*b)) &&
        !(norm <= cfg_.suspect_floor * get_own())) {
      // The floor is for a partner we cannot compare with enough others (a swarm of three, the
      // odd one of a partition that healed), which moves as we mix with it; a replay does not.
      j.replay = replaying(partner);
      if (!cfg_.suspect_clip && !gap) j.why = "persistent";
      else suspect(j, p, *b, norm, gap, get_own, gap || (!over && !j.replay));
      return j;
    }
  }
  p.suspect_streak = 0;
  return j;
}

// B * decay^(streak - 1); with floor_on (a progress gap, or fewer than three partners to compare
// with) never below suspect_min_clip * min(||r - s||, ||s||): a clip of at least
// suspect_min_clip while it is within our own norm, and a pull of at most
// w * suspect_min_clip * ||s|| per exchange from one beyond it. A partner that came closer
// since its streak began starts a new streak.
void RobustBound::suspect(Judgement& j, Partner& p, double base, double norm, bool gap,
                          const std::function<double()>& own, bool floor_on) {
  if (p.suspect_streak == 0 || norm < cfg_.recover_frac * p.streak_norm) {
    p.suspect_streak = 0;
    p.streak_norm = norm;
  }
  j.suspect = true;
  j.gap = gap;
  j.streak = ++p.suspect_streak;
  double t = base * std::pow(cfg_.suspect_decay, j.streak - 1);
  // The floor here is for a gap partner, and for one we cannot compare with enough others; two
  // honest peers that drifted apart get theirs in the agreed clip, where both votes show the
  // suspicion is mutual (exchange_protocol.cpp).
  const double floor = floor_on ? cfg_.suspect_min_clip * std::min(norm, own()) : 0.0;
  if (t < floor) {
    t = floor;
    j.floored = true;
  }
  j.tau = std::max(t, 1e-12);
}

// In the warm-up, every partner we met was beyond our own norm, and there were two or more: the
// odd one out is more likely us (started late, from zero weights, or the first exchange came
// after many steps alone) than all of them. Refusing them banned both partners of a three-peer
// swarm whose peers trained alone for hundreds of steps first (docs/python.md). One partner
// far, or any partner near, says nothing of the kind: the warm-up's refusal stands.
bool RobustBound::odd_one_out_locked() const {
  if (warm_near_) return false;
  int far = 0;
  for (const auto& [id, q] : partners_) far += q.warm_far ? 1 : 0;
  return far >= 2;
}

bool RobustBound::norm_says_nothing_locked(double own) const {
  return own_step_ >= 0 && own_step_ < cfg_.gap_min_steps && initial_norm_ >= 0 &&
         2 * initial_norm_ < own;
}

void RobustBound::set_initial_norm(double norm) {
  std::lock_guard<std::mutex> lk(mu_);
  if (initial_norm_ < 0 && std::isfinite(norm)) initial_norm_ = norm;
}

bool RobustBound::progress_gap(const Partner& p) const {
  if (p.step < 0 || own_step_ < 0) return false;
  const std::int64_t lo = std::min(p.step, own_step_), hi = std::max(p.step, own_step_);
  return hi - lo >= cfg_.gap_min_steps && double(lo) < cfg_.gap_ratio * double(hi);
}

bool RobustBound::replaying(const std::string& id) const {
  if (cfg_.replay_repeats <= 0) return false;
  const auto it = partners_.find(id);
  return it != partners_.end() && it->second.repeats >= cfg_.replay_repeats;
}

void RobustBound::heard_payload(const std::string& partner, std::uint64_t hash) {
  std::lock_guard<std::mutex> lk(mu_);
  Partner& p = partners_[partner];  // bounded: judge's forget_stale runs next
  p.repeats = p.has_payload && p.payload == hash ? p.repeats + 1 : 0;
  p.payload = hash;
  p.has_payload = true;
}

void RobustBound::set_own_step(std::int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  own_step_ = step;
}

void RobustBound::heard_step(const std::string& partner, std::int64_t step, Millis now) {
  std::lock_guard<std::mutex> lk(mu_);
  forget_stale(now);
  Partner& p = partners_[partner];
  p.step = step;
  p.last = now;
}

void RobustBound::accepted(const std::string& partner, double norm) {
  if (!(norm >= 0)) return;
  std::lock_guard<std::mutex> lk(mu_);
  hist_.emplace_back(partner, norm);
  while (hist_.size() > 2 * std::size_t(cfg_.clip_window)) hist_.pop_front();
  ++accepted_;
}

}  // namespace gossiptrain::gossip
