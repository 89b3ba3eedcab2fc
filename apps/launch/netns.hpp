// gossip-launch --netns (issue 10): every peer on a "host" of its own, a network namespace with its
// own address on a bridge, so peers talk over real TCP between different IP addresses as on
// several machines, and the churn scenario's partition and link events become real network faults.
// This module only builds and shapes that network; it starts no peers (exec_prefix(i) is the argv
// prefix that runs a program on host i). It shells out to `ip`, `nft` and `tc` (iproute2 and
// nftables; needs root) and throws std::runtime_error naming the command that failed and its
// output.
//
// Layout of one run, RUN = the run id ([A-Za-z0-9_], at most 24 characters):
//   namespace gt-RUN-br    the bridge br0, with port p<i> towards host i; no address
//   namespace gt-RUN-h<i>  host i: lo and eth0 (a veth whose peer is p<i>), address ip(i)/16
// Nothing is created in the host's root namespace, and the addresses exist only inside these
// namespaces (so runs never clash over addresses; only the namespace names must differ, and the
// "gt-RUN-" prefix with '-' excluded from run ids keeps one run's names apart from another's).
// Interface names do not carry the run id: they live in the run's own namespaces (<= 15 chars).
// Addresses: host i is 10.88.<i / 250>.<i % 250 + 1>/16: kMaxHosts (1000) hosts fit, and no
// address ends in .0 or .255.
//
// Faults, all inside host i's namespace (nft table `inet gtnet`: `gt` is an nft keyword) or on
// the bridge port towards it:
//   partition: a set of blocked addresses per host; input drops packets from them, output drops
//     packets to them (a TCP connect across groups times out or fails, established connections
//     stall). Hosts named in no group form one implicit group of their own ("the rest").
//   link rate: a tbf qdisc on host i's eth0 (i to others) and on the bridge port p<i> (others
//     to i).
//   link loss: `numgen random mod 1000 < loss*1000 drop` on eth0's input and output, so each
//     packet into or out of host i is dropped with probability `loss` (a packet between two lossy
//     hosts passes both rules).
// There is NO added delay: `tc netem` does not exist in this kernel (nor the fq or prio qdiscs).
// Only IPv4 traffic is partitioned (peers use IPv4); loss applies to everything on eth0.
//
// Deleting a namespace deletes its veths, qdiscs and rules; a namespace in which a process still
// runs stays alive (unnamed) until that process exits, so stop the peers before the swarm.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::apps {

// What a link event put in force on one host (nullopt: not limited).
struct LinkState {
  std::optional<double> rate_mbit;  // tbf cap, both directions
  std::optional<double> loss;       // drop probability in [0,1], each direction
  bool shaped() const { return rate_mbit.has_value() || loss.has_value(); }
  nlohmann::json to_json() const;  // {"rate_mbit": x, "loss": y}, null for what is not set
};

// The partition in force (for events.jsonl and the live table). Empty groups: none.
struct PartitionState {
  std::vector<std::vector<int>> groups;  // as given to partition()
  bool active() const { return !groups.empty(); }
  // Index of the group holding host i; groups.size() for the implicit group of hosts named in
  // none; -1 when there is no partition.
  int group_of(int i) const;
  // Whether hosts a and b can reach each other (always, without a partition).
  bool connected(int a, int b) const;
  // Hosts of 0..n-1 that can reach no other host of 0..n-1 (alone in their group).
  std::vector<int> isolated(int n) const;
  // e.g. "[0,1] | [2] | rest", or "none".
  std::string describe() const;
  nlohmann::json to_json() const;  // {"groups": [[...], ...]}
};

// What running a command gave: exit code (-1 if it did not exit normally or timed out) and its
// stdout and stderr together.
struct CommandResult {
  int rc = -1;
  std::string output;
  bool timed_out = false;
};
// Runs argv (argv[0] a path, no shell) with `input` on its stdin; kills it after timeout_s.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "",
                          double timeout_s = 20.0);

class NetnsSwarm {
 public:
  static constexpr int kMaxHosts = 1000;  // a Linux bridge has at most 1024 ports

  // Creates the bridge namespace; hosts come with add_host. Throws std::invalid_argument for a
  // bad run id or max_hosts outside 1..kMaxHosts, std::runtime_error when a command fails (e.g.
  // a namespace of this run id is left from a crash: see cleanup_stale).
  NetnsSwarm(std::string run_id, int max_hosts);
  ~NetnsSwarm();  // removes every namespace it created; failures are logged, never thrown
  NetnsSwarm(const NetnsSwarm&) = delete;
  NetnsSwarm& operator=(const NetnsSwarm&) = delete;

  // Creates host i (0 <= i < max_hosts) if it does not exist yet; a partition in force applies to
  // it at once (it joins its group, or the implicit one). Throws on failure, leaving nothing of it.
  void add_host(int i);
  bool has_host(int i) const;
  std::vector<int> hosts() const;  // ascending

  // argv prefix that runs a program on host i: {"<path of ip>", "netns", "exec", ns(i)}.
  std::vector<std::string> exec_prefix(int i) const;
  std::string ip(int i) const { return address(i); }  // host i's address, without "/16"
  static std::string address(int i);                  // the address host i of any run gets
  std::string ns(int i) const;                        // host i's namespace name
  std::string bridge_ns() const;
  const std::string& run_id() const { return run_id_; }

  // Hosts in different groups cannot reach each other; hosts named in no group form one group of
  // their own. Replaces any partition in force. Groups may name hosts not added yet. Throws
  // std::invalid_argument for an index out of range or a host in two groups.
  void partition(const std::vector<std::vector<int>>& groups);
  void heal();  // removes the partition (no-op without one)
  const PartitionState& partition_state() const { return partition_; }

  // Sets host i's link to exactly this: a rate cap in Mbit/s (> 0) and/or a loss probability in
  // [0,1]; nullopt removes that part. Host i must exist.
  void set_link(int i, std::optional<double> rate_mbit, std::optional<double> loss);
  void clear_link(int i) { set_link(i, std::nullopt, std::nullopt); }
  LinkState link(int i) const;

  // Packets host i's loss rules dropped so far (in + out), from the nft counters.
  long long loss_drops(int i) const;

  // Deletes every namespace named gt-RUN-* (or, with an empty run id, every gt-*: also those of a
  // launcher still running, and check_available's probes). Returns how many; throws
  // std::invalid_argument for a bad run id, std::runtime_error when `ip netns` fails.
  static int cleanup_stale(const std::string& run_id = "");
  // Whether this machine can run a swarm: root, ip/nft/tc found, and a probe namespace with a
  // veth, a bridge, a tbf qdisc and an nft numgen rule works (it is deleted again). If not, *why
  // (if given) says what is missing.
  static bool check_available(std::string* why = nullptr);
  // A fresh run id: the process id and a random part, e.g. "3f9a1c2b".
  static std::string make_run_id();

 private:
  struct Host {
    bool exists = false;
    LinkState link;
  };
  void create_host(int i);
  void apply_partition(int i);
  void apply_rate(int i, std::optional<double> rate_mbit);
  void apply_loss(int i, std::optional<double> loss);
  void check_host(int i, const char* what) const;

  std::string run_id_;
  int max_hosts_;
  std::vector<Host> hosts_;
  PartitionState partition_;
  std::vector<std::string> created_;  // namespaces, in creation order
};

}  // namespace gossiptrain::apps
