#include "gossip/exchange/partner_schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace gossiptrain::gossip {

namespace {
// The largest power of two <= n (n >= 1) and its log2.
int floor_pow2(int n, int& log2) {
  int p = 1;
  log2 = 0;
  while (p <= n / 2) {
    p *= 2;
    ++log2;
  }
  return p;
}
// Members the block of 2^k core ranks starting at `first` stands for: one each, plus one for each
// rank below q (it holds an extra rank's vector too).
double block_mass(int first, int k, int q) {
  const int size = 1 << k;
  return size + std::clamp(q - first, 0, size);
}
}  // namespace

int schedule_length(int n) {
  if (n <= 1) return 0;
  int l = 0;
  const int p = floor_pow2(n, l);
  return p == n ? l : l + 2;
}

ScheduleStep schedule_step(int n, int rank, int round) {
  if (n <= 1 || rank < 0 || rank >= n || round < 0 || round >= schedule_length(n))
    throw std::invalid_argument("partner schedule: rank or round out of range");
  int l = 0;
  const int p = floor_pow2(n, l);
  const int q = n - p;
  if (q == 0) return {rank ^ (1 << round), 0.5};
  if (round == 0) {  // fold the extras in
    if (rank >= p) return {rank - p, 0.5};
    if (rank < q) return {rank + p, 0.5};
    return {};
  }
  if (round == l + 1) {  // hand the average back to the extras
    if (rank >= p) return {rank - p, 1.0};
    if (rank < q) return {rank + p, 0.0};
    return {};
  }
  if (rank >= p) return {};
  const int k = round - 1;
  const int partner = rank ^ (1 << k);
  const double own = block_mass(rank >> k << k, k, q);
  const double other = block_mass(partner >> k << k, k, q);
  return {partner, other / (own + other)};
}

int ScheduleView::rank_of(const std::string& id) const {
  auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? static_cast<int>(it - ids.begin()) : -1;
}

ScheduleView make_view(std::vector<std::string> ids, const std::string& local_id) {
  ScheduleView v;
  ids.push_back(local_id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& id : ids) {
    for (unsigned char c : id) h = (h ^ c) * 0x100000001b3ULL;
    h = (h ^ 0xff) * 0x100000001b3ULL;  // separator
  }
  v.hash = h ? h : 1;
  v.ids = std::move(ids);
  v.rank = v.rank_of(local_id);
  return v;
}

}  // namespace gossiptrain::gossip
