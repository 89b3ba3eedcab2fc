// Tests for the partitioners: exact cover, determinism, the skew each spec promises, and the
// errors for bad specs and impossible splits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/partition.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::core;
using gt_test::WhatContains;

namespace {

using Parts = std::vector<std::vector<std::size_t>>;

// classes * per_class labels, sorted by label (the hardest input for a careless iid split).
std::vector<std::int32_t> sorted_labels(int classes, int per_class) {
  std::vector<std::int32_t> y;
  for (int c = 0; c < classes; ++c) y.insert(y.end(), static_cast<std::size_t>(per_class), c);
  return y;
}

// The same labels scattered by a fixed permutation (a stride coprime to the size), so no
// library RNG is involved and every class keeps exactly per_class samples.
std::vector<std::int32_t> mixed_labels(int classes, int per_class) {
  auto sorted = sorted_labels(classes, per_class);
  constexpr std::size_t kStride = 7919;  // prime, so coprime to every size used here
  std::vector<std::int32_t> y(sorted.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[(i * kStride) % y.size()] = sorted[i];
  return y;
}

void check_cover(const Parts& parts, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& p : parts) {
    CHECK_FALSE(p.empty());
    for (auto i : p) {
      REQUIRE(i < n);
      ++seen[i];
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
}

std::vector<std::vector<double>> class_shares(const Parts& parts,
                                              const std::vector<std::int32_t>& y, int classes) {
  std::vector<std::vector<double>> out;
  for (const auto& p : parts) {
    std::vector<double> h(static_cast<std::size_t>(classes), 0.0);
    for (auto i : p) h[static_cast<std::size_t>(y[i])] += 1.0;
    for (double& v : h) v /= static_cast<double>(p.size());
    out.push_back(h);
  }
  return out;
}

double mean_top_share(const Parts& parts, const std::vector<std::int32_t>& y, int classes) {
  double sum = 0.0;
  for (const auto& h : class_shares(parts, y, classes))
    sum += *std::max_element(h.begin(), h.end());
  return sum / static_cast<double>(parts.size());
}

}  // namespace

TEST_CASE("parse_partition accepts the three forms", "[core]") {
  CHECK(parse_partition("iid").kind == PartitionSpec::Kind::Iid);
  auto d = parse_partition("dirichlet:0.1");
  CHECK(d.kind == PartitionSpec::Kind::Dirichlet);
  CHECK(d.alpha == 0.1);
  CHECK(parse_partition("dirichlet:100").alpha == 100.0);
  auto s = parse_partition("shards:2");
  CHECK(s.kind == PartitionSpec::Kind::Shards);
  CHECK(s.k == 2);
  auto c = parse_partition("classes:3");
  CHECK(c.kind == PartitionSpec::Kind::Classes);
  CHECK(c.k == 3);
}

TEST_CASE("parse_partition rejects bad specs naming the accepted forms", "[core]") {
  for (const char* bad : {"",
                          "IID",
                          "random",
                          "dirichlet",
                          "dirichlet:",
                          "dirichlet:0",
                          "dirichlet:-1",
                          "dirichlet:abc",
                          "dirichlet:1x",
                          "dirichlet:nan",
                          "dirichlet:inf",
                          "shards",
                          "shards:",
                          "shards:0",
                          "shards:-2",
                          "shards:1.5",
                          "shards:two",
                          " iid",
                          "classes",
                          "classes:",
                          "classes:0",
                          "classes:-1",
                          "classes:2.5"}) {
    INFO("spec '" << bad << "'");
    CHECK_THROWS_MATCHES(
        parse_partition(bad), std::invalid_argument,
        WhatContains("'" + std::string(bad) + "'") &&
            WhatContains(
                "expected iid, dirichlet:ALPHA (ALPHA > 0), shards:K or classes:K (K >= 1)"));
  }
  CHECK_THROWS_MATCHES(
      parse_partition("x"), std::invalid_argument,
      Catch::Matchers::Message("unknown partition 'x': expected iid, dirichlet:ALPHA (ALPHA > 0), "
                               "shards:K or classes:K (K >= 1)"));
}

TEST_CASE("every partitioner covers every index once, deterministically in the seed", "[core]") {
  auto y = mixed_labels(10, 100);
  for (const char* spec : {"iid", "dirichlet:0.1", "dirichlet:1", "dirichlet:100", "shards:1",
                           "shards:2", "shards:5", "classes:10"}) {
    for (int shards : {1, 3, 8, 10}) {
      INFO(spec << " over " << shards << " shards");
      auto ps = parse_partition(spec);
      Parts a = partition(y, 10, shards, ps, 42);
      REQUIRE(a.size() == static_cast<std::size_t>(shards));
      check_cover(a, y.size());
      CHECK(partition(y, 10, shards, ps, 42) == a);
      if (shards > 1) CHECK(partition(y, 10, shards, ps, 43) != a);
    }
  }
}

TEST_CASE("iid shards are near-equal and look like the whole set", "[core]") {
  auto y = sorted_labels(10, 1000);
  Parts parts = partition(y, 10, 7, parse_partition("iid"), 1);
  check_cover(parts, y.size());
  auto [lo, hi] = std::minmax_element(
      parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
  CHECK(hi->size() - lo->size() <= 1);
  // ~1430 samples a shard: a class share's standard deviation is under 0.01.
  for (const auto& h : class_shares(parts, y, 10)) {
    for (double v : h) CHECK(std::abs(v - 0.1) < 0.04);
  }
}

TEST_CASE("dirichlet skew follows alpha", "[core]") {
  auto y = mixed_labels(10, 1000);
  double skewed = mean_top_share(partition(y, 10, 10, parse_partition("dirichlet:0.1"), 5), y, 10);
  double flat = mean_top_share(partition(y, 10, 10, parse_partition("dirichlet:100"), 5), y, 10);
  INFO("mean largest class share: alpha 0.1 -> " << skewed << ", alpha 100 -> " << flat);
  CHECK(skewed > 0.5);
  CHECK(flat < 0.2);
}

TEST_CASE("dirichlet with tiny alpha still gives every shard a sample", "[core]") {
  auto y = sorted_labels(10, 20);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Parts parts = partition(y, 10, 50, parse_partition("dirichlet:0.01"), seed);
    check_cover(parts, y.size());
  }
  // Exactly one sample per shard is the extreme that must still work.
  check_cover(partition(y, 10, static_cast<int>(y.size()), parse_partition("dirichlet:0.05"), 3),
              y.size());
}

TEST_CASE("shards:K gives each peer about K labels", "[core]") {
  for (bool sorted : {true, false}) {
    auto y = sorted ? sorted_labels(10, 100) : mixed_labels(10, 100);
    INFO((sorted ? "label-sorted" : "mixed") << " input");
    // 10 peers x 2 shards of 50: every cut holds exactly one label.
    for (const auto& p : partition(y, 10, 10, parse_partition("shards:2"), 9)) {
      std::set<int> labels;
      for (auto i : p) labels.insert(y[i]);
      CHECK(labels.size() <= 2);
      CHECK(p.size() == 100);
    }
    // 7 peers x 2 cuts of ~71 samples: a cut can straddle one label boundary.
    for (const auto& p : partition(y, 10, 7, parse_partition("shards:2"), 9)) {
      std::set<int> labels;
      for (auto i : p) labels.insert(y[i]);
      CHECK(labels.size() <= 4);
    }
  }
}

TEST_CASE("impossible splits are refused with a clear message", "[core]") {
  auto y = sorted_labels(10, 3);  // 30 samples
  CHECK_THROWS_MATCHES(partition(y, 10, 0, parse_partition("iid"), 1), std::invalid_argument,
                       WhatContains("must be >= 1"));
  CHECK_THROWS_MATCHES(partition(y, 10, 31, parse_partition("iid"), 1), std::invalid_argument,
                       WhatContains("30 samples into 31"));
  CHECK_THROWS_MATCHES(partition(y, 10, 31, parse_partition("dirichlet:1"), 1),
                       std::invalid_argument, WhatContains("30 samples into 31"));
  CHECK_THROWS_MATCHES(partition(y, 10, 8, parse_partition("shards:4"), 1), std::invalid_argument,
                       WhatContains("needs 32 label shards") && WhatContains("only 30 samples"));
  CHECK_THROWS_MATCHES(partition({}, 10, 1, parse_partition("iid"), 1), std::invalid_argument,
                       WhatContains("0 samples"));
  CHECK_THROWS_MATCHES(partition(y, 5, 2, parse_partition("iid"), 1), std::invalid_argument,
                       WhatContains("label 5"));
  PartitionSpec bad_alpha;
  bad_alpha.kind = PartitionSpec::Kind::Dirichlet;
  bad_alpha.alpha = 0.0;
  CHECK_THROWS_AS(partition(y, 10, 2, bad_alpha, 1), std::invalid_argument);
  // The largest possible shards:K split still works.
  check_cover(partition(y, 10, 10, parse_partition("shards:3"), 1), y.size());
}

TEST_CASE("classes:K gives each peer exactly K labels and splits each label among its holders",
          "[core]") {
  auto y = mixed_labels(10, 100);
  for (int k : {1, 2, 3, 10}) {
    for (int shards : {10, 13, 25}) {
      INFO("classes:" << k << " over " << shards << " shards");
      auto ps = parse_partition("classes:" + std::to_string(k));
      Parts a = partition(y, 10, shards, ps, 42);
      REQUIRE(a.size() == static_cast<std::size_t>(shards));
      // Every label is held by someone here (shards >= classes), so the cover is exact.
      check_cover(a, y.size());
      std::vector<int> holders(10, 0);
      for (std::size_t i = 0; i < a.size(); ++i) {
        std::set<int> labels;
        for (auto s : a[i]) labels.insert(y[s]);
        CHECK(labels.size() == static_cast<std::size_t>(k));
        CHECK(labels.count(static_cast<int>(i % 10)) == 1);  // NIID-Bench: label i % classes first
        for (int l : labels) ++holders[static_cast<std::size_t>(l)];
      }
      // Each label's 100 samples are cut into near-equal runs, one per holder.
      for (std::size_t i = 0; i < a.size(); ++i) {
        std::vector<std::size_t> count(10, 0);
        for (auto s : a[i]) ++count[static_cast<std::size_t>(y[s])];
        for (std::size_t l = 0; l < 10; ++l) {
          if (count[l] == 0) continue;
          const std::size_t h = static_cast<std::size_t>(holders[l]);
          CHECK(count[l] >= 100 / h);
          CHECK(count[l] <= (100 + h - 1) / h);
        }
      }
      CHECK(partition(y, 10, shards, ps, 42) == a);
      // classes:1 over 10 peers is one whole label per peer whatever the seed.
      if (!(k == 1 && shards == 10)) CHECK(partition(y, 10, shards, ps, 43) != a);
    }
  }
}

TEST_CASE("classes:K refuses splits it cannot make", "[core]") {
  auto y = mixed_labels(10, 3);  // 30 samples, 3 per label
  CHECK_THROWS_MATCHES(partition(y, 10, 10, parse_partition("classes:11"), 1),
                       std::invalid_argument,
                       WhatContains("classes:11") && WhatContains("only 10 classes"));
  // 5 peers with one label each leave labels 5..9 with nobody.
  CHECK_THROWS_MATCHES(partition(y, 10, 5, parse_partition("classes:1"), 1), std::invalid_argument,
                       WhatContains("leaves label 5 with no peer"));
  // 20 peers with all 10 labels: 20 holders for 3 samples of each label.
  CHECK_THROWS_MATCHES(partition(y, 10, 20, parse_partition("classes:10"), 1),
                       std::invalid_argument, WhatContains("has 3 samples for 20 peers"));
  // The same with enough samples works.
  check_cover(partition(mixed_labels(10, 20), 10, 20, parse_partition("classes:10"), 1), 200);
}
