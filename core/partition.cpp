// Deterministic partitioners (iid, dirichlet:ALPHA, shards:K, classes:K). All randomness comes from
// our own xoshiro256** and gamma sampler, so a seed gives the same split with every standard
// library.
#include "core/partition.hpp"

#include "base/rng.hpp"
#include "core/parse_number.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace gossiptrain::core {
namespace {

constexpr const char* kAcceptedForms =
    "expected iid, dirichlet:ALPHA (ALPHA > 0), shards:K or classes:K (K >= 1)";

// xoshiro256**: the same split with every standard library.
using Rng = base::Xoshiro256;

using base::shuffle;

// log of a Gamma(alpha, 1) draw (Marsaglia-Tsang). Working in logs matters for small alpha: the
// alpha < 1 boost multiplies by U^(1/alpha), which underflows to 0 in doubles for alpha ~ 0.01.
double log_gamma_draw(double alpha, Rng& rng) {
  if (alpha < 1.0) return log_gamma_draw(alpha + 1.0, rng) + std::log(rng.uniform_open()) / alpha;
  double d = alpha - 1.0 / 3.0;
  double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = rng.normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    if (std::log(rng.uniform_open()) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      return std::log(d * v);
    }
  }
}

std::vector<double> dirichlet_draw(double alpha, int k, Rng& rng) {
  std::vector<double> p(static_cast<std::size_t>(k));
  double top = -std::numeric_limits<double>::infinity();
  for (double& v : p) {
    v = log_gamma_draw(alpha, rng);
    top = std::max(top, v);
  }
  double sum = 0.0;
  for (double& v : p) sum += (v = std::exp(v - top));  // the largest is exp(0) = 1, so sum >= 1
  for (double& v : p) v /= sum;
  return p;
}

std::vector<std::vector<std::size_t>> split_iid(std::size_t n, int num_shards, Rng& rng) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  shuffle(order, rng);
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(num_shards));
  std::size_t s = static_cast<std::size_t>(num_shards);
  for (std::size_t k = 0; k < s; ++k) {
    out[k].assign(order.begin() + static_cast<std::ptrdiff_t>(k * n / s),
                  order.begin() + static_cast<std::ptrdiff_t>((k + 1) * n / s));
  }
  return out;
}

std::vector<std::vector<std::size_t>> by_class(const std::vector<std::int32_t>& labels,
                                               int classes) {
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(classes));
  for (std::size_t i = 0; i < labels.size(); ++i)
    out[static_cast<std::size_t>(labels[i])].push_back(i);
  return out;
}

std::vector<std::vector<std::size_t>> split_dirichlet(const std::vector<std::int32_t>& labels,
                                                      int classes, int num_shards, double alpha,
                                                      Rng& rng) {
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(num_shards));
  for (auto& members : by_class(labels, classes)) {
    shuffle(members, rng);
    std::vector<double> p = dirichlet_draw(alpha, num_shards, rng);
    // Cut the class at rounded cumulative proportions: counts sum to the class size exactly.
    double cum = 0.0;
    std::size_t begin = 0, n = members.size();
    for (int k = 0; k < num_shards; ++k) {
      cum += p[static_cast<std::size_t>(k)];
      std::size_t end = k + 1 == num_shards
                            ? n
                            : std::min(n, static_cast<std::size_t>(std::llround(cum * double(n))));
      end = std::max(end, begin);
      out[static_cast<std::size_t>(k)].insert(out[static_cast<std::size_t>(k)].end(),
                                              members.begin() + static_cast<std::ptrdiff_t>(begin),
                                              members.begin() + static_cast<std::ptrdiff_t>(end));
      begin = end;
    }
  }
  // Small alpha leaves shards empty; a peer with no data cannot train, so lend each one a sample
  // from the largest shard (there is always one with two or more, since n >= num_shards).
  for (auto& shard : out) {
    if (!shard.empty()) continue;
    auto largest = std::max_element(
        out.begin(), out.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    shard.push_back(largest->back());
    largest->pop_back();
  }
  return out;
}

std::vector<std::vector<std::size_t>> split_shards(const std::vector<std::int32_t>& labels,
                                                   int classes, int num_shards, int k, Rng& rng) {
  std::size_t n = labels.size();
  std::size_t total = static_cast<std::size_t>(num_shards) * static_cast<std::size_t>(k);
  if (total > n) {
    throw std::invalid_argument("partition shards:" + std::to_string(k) + " over " +
                                std::to_string(num_shards) + " shards needs " +
                                std::to_string(total) + " label shards but there are only " +
                                std::to_string(n) + " samples");
  }
  // Label-sorted order (classes in turn, each shuffled) so each cut holds one or two labels.
  std::vector<std::size_t> order;
  order.reserve(n);
  for (auto& members : by_class(labels, classes)) {
    shuffle(members, rng);
    order.insert(order.end(), members.begin(), members.end());
  }
  std::vector<std::size_t> deal(total);
  for (std::size_t t = 0; t < total; ++t) deal[t] = t;
  shuffle(deal, rng);
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(num_shards));
  for (std::size_t slot = 0; slot < total; ++slot) {
    std::size_t t = deal[slot];
    auto& dst = out[slot / static_cast<std::size_t>(k)];
    dst.insert(dst.end(), order.begin() + static_cast<std::ptrdiff_t>(t * n / total),
               order.begin() + static_cast<std::ptrdiff_t>((t + 1) * n / total));
  }
  return out;
}

// NIID-Bench's "#C=k" (Li et al., ICDE 2022, partition "noniid-#label"): shard i holds label
// i % classes, then k - 1 more distinct labels drawn at random; each label's samples, shuffled,
// are cut into near-equal runs (numpy's array_split: the first n % holders runs get one more), one
// per holder in shard order. NIID-Bench crashes when a label has no holder; we refuse instead, so
// that every sample is in some shard, as with the other partitioners.
std::vector<std::vector<std::size_t>> split_classes(const std::vector<std::int32_t>& labels,
                                                    int classes, int num_shards, int k, Rng& rng) {
  const std::string name = "partition classes:" + std::to_string(k);
  if (k > classes) {
    throw std::invalid_argument(name + " needs " + std::to_string(k) +
                                " distinct labels per peer but the data set has only " +
                                std::to_string(classes) + " classes");
  }
  const auto n_classes = static_cast<std::size_t>(classes);
  std::vector<std::vector<int>> held(static_cast<std::size_t>(num_shards));
  std::vector<std::vector<std::size_t>> holders(n_classes);  // shards holding each label, in order
  for (int i = 0; i < num_shards; ++i) {
    auto& mine = held[static_cast<std::size_t>(i)];
    mine.push_back(i % classes);
    while (static_cast<int>(mine.size()) < k) {
      const int c = static_cast<int>(rng.below(n_classes));
      if (std::find(mine.begin(), mine.end(), c) == mine.end()) mine.push_back(c);
    }
    for (int c : mine) holders[static_cast<std::size_t>(c)].push_back(static_cast<std::size_t>(i));
  }
  auto members = by_class(labels, classes);
  for (std::size_t c = 0; c < n_classes; ++c) {
    if (holders[c].empty()) {
      throw std::invalid_argument(name + " over " + std::to_string(num_shards) +
                                  " peers leaves label " + std::to_string(c) +
                                  " with no peer (use at least as many peers as classes, or a "
                                  "larger K)");
    }
    if (members[c].size() < holders[c].size()) {
      throw std::invalid_argument(name + ": label " + std::to_string(c) + " has " +
                                  std::to_string(members[c].size()) + " samples for " +
                                  std::to_string(holders[c].size()) + " peers holding it");
    }
  }
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(num_shards));
  for (std::size_t c = 0; c < n_classes; ++c) {
    auto& m = members[c];
    shuffle(m, rng);
    const std::size_t parts = holders[c].size(), base = m.size() / parts, extra = m.size() % parts;
    std::size_t begin = 0;
    for (std::size_t j = 0; j < parts; ++j) {
      const std::size_t end = begin + base + (j < extra ? 1 : 0);
      auto& dst = out[holders[c][j]];
      dst.insert(dst.end(), m.begin() + static_cast<std::ptrdiff_t>(begin),
                 m.begin() + static_cast<std::ptrdiff_t>(end));
      begin = end;
    }
  }
  return out;
}

}  // namespace

PartitionSpec parse_partition(std::string_view s) {
  auto fail = [&](const std::string& why) -> PartitionSpec {
    throw std::invalid_argument("bad partition '" + std::string(s) + "': " + why + "; " +
                                kAcceptedForms);
  };
  PartitionSpec spec;
  if (s == "iid") return spec;
  constexpr std::string_view kDir = "dirichlet:", kShards = "shards:", kClasses = "classes:";
  if (s.starts_with(kDir)) {
    const auto alpha = parse_whole<double>(s.substr(kDir.size()));
    if (!alpha) return fail("ALPHA is not a number");
    if (!(*alpha > 0.0) || !std::isfinite(*alpha)) return fail("ALPHA must be a finite number > 0");
    spec.kind = PartitionSpec::Kind::Dirichlet;
    spec.alpha = *alpha;
    return spec;
  }
  if (s.starts_with(kShards)) {
    const auto k = parse_whole<int>(s.substr(kShards.size()));
    if (!k) return fail("K is not an integer");
    if (*k < 1) return fail("K must be >= 1");
    spec.kind = PartitionSpec::Kind::Shards;
    spec.k = *k;
    return spec;
  }
  if (s.starts_with(kClasses)) {
    const auto k = parse_whole<int>(s.substr(kClasses.size()));
    if (!k) return fail("K is not an integer");
    if (*k < 1) return fail("K must be >= 1");
    spec.kind = PartitionSpec::Kind::Classes;
    spec.k = *k;
    return spec;
  }
  throw std::invalid_argument("unknown partition '" + std::string(s) + "': " + kAcceptedForms);
}

std::vector<std::vector<std::size_t>> partition(const std::vector<std::int32_t>& labels,
                                                int classes, int num_shards,
                                                const PartitionSpec& spec, std::uint64_t seed) {
  if (num_shards < 1) {
    throw std::invalid_argument("partition: the number of shards must be >= 1, got " +
                                std::to_string(num_shards));
  }
  if (labels.size() < static_cast<std::size_t>(num_shards)) {
    throw std::invalid_argument("partition: cannot split " + std::to_string(labels.size()) +
                                " samples into " + std::to_string(num_shards) +
                                " non-empty shards");
  }
  if (classes < 1) {
    throw std::invalid_argument("partition: classes must be >= 1, got " + std::to_string(classes));
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw std::invalid_argument("partition: label " + std::to_string(labels[i]) + " at index " +
                                  std::to_string(i) + " is outside 0.." +
                                  std::to_string(classes - 1));
    }
  }
  Rng rng(seed);
  std::vector<std::vector<std::size_t>> out;
  switch (spec.kind) {
    case PartitionSpec::Kind::Iid: out = split_iid(labels.size(), num_shards, rng); break;
    case PartitionSpec::Kind::Dirichlet:
      if (!(spec.alpha > 0.0) || !std::isfinite(spec.alpha)) {
        throw std::invalid_argument("partition: dirichlet ALPHA must be a finite number > 0");
      }
      out = split_dirichlet(labels, classes, num_shards, spec.alpha, rng);
      break;
    case PartitionSpec::Kind::Shards:
      if (spec.k < 1) throw std::invalid_argument("partition: shards K must be >= 1");
      out = split_shards(labels, classes, num_shards, spec.k, rng);
      break;
    case PartitionSpec::Kind::Classes:
      if (spec.k < 1) throw std::invalid_argument("partition: classes K must be >= 1");
      out = split_classes(labels, classes, num_shards, spec.k, rng);
      break;
  }
  // Ascending order within a shard: the order carries no information and reads are friendlier.
  for (auto& shard : out) std::sort(shard.begin(), shard.end());
  return out;
}

}  // namespace gossiptrain::core
