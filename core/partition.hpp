// Deterministic partitioners that split a data set over peers: iid, dirichlet:ALPHA (per-class
// Dirichlet proportions over shards), shards:K (K label-sorted shards per peer) and classes:K
// (NIID-Bench's "#C=K": K distinct labels per peer, each label split among its holders).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gossiptrain::core {

struct PartitionSpec {
  enum class Kind { Iid, Dirichlet, Shards, Classes } kind = Kind::Iid;
  double alpha = 0.0;  // dirichlet
  int k = 0;           // shards: label shards per peer; classes: labels per peer
};

// Parses "iid", "dirichlet:ALPHA" (ALPHA > 0), "shards:K" or "classes:K" (K >= 1); throws
// std::invalid_argument with a message naming the accepted forms.
PartitionSpec parse_partition(std::string_view s);

// Splits the indices [0, labels.size()) into num_shards disjoint lists that together cover every
// index exactly once (classes:K: every index of a label that some shard holds, and every label
// must be held). Same inputs and seed -> same output. Throws std::invalid_argument when the
// split is impossible (e.g. num_shards * k label shards exceed the number of samples, or
// num_shards < 1, or fewer samples than shards; classes:K with K > classes, a label held by no
// shard, or a label with fewer samples than holders). Every shard gets at least one sample.
std::vector<std::vector<std::size_t>> partition(const std::vector<std::int32_t>& labels,
                                                int classes, int num_shards,
                                                const PartitionSpec& spec, std::uint64_t seed);

}  // namespace gossiptrain::core
