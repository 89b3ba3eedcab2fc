// gossip-launch --mode fedavg: the argv of a FedAvg server (peer0) and its N clients (peer1..N),
// with the shards, seed, model and metric files that N gossip peers would have.
#include <string>
#include <vector>

#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

std::vector<PeerPlan> plan_fedavg(const LaunchOptions& o, const std::string& run_dir,
                                  const std::vector<int>& ports, const std::string& network_key) {
  const int clients = o.peers - 1;
  // Clients that join later (--churn join) take the next slots and shards, as gossip peers do.
  const int shards = o.slots() - 1;
  const std::string server = "127.0.0.1:" + std::to_string(ports.at(0));
  std::vector<PeerPlan> plans;
  for (int i = 0; i < o.slots(); ++i) {
    PeerPlan p;
    p.index = i;
    p.dir = run_dir + "/peer" + std::to_string(i);
    std::vector<std::string>& a = p.argv;
    // The server starts its first round with every client (a forwarded --min-clients overrides).
    if (i == 0) a = {"--min-clients", std::to_string(clients)};
    append_launch_flags(a, o, i, network_key);
    // The server reads shard 0 only for its test set; client i trains gossip peer i-1's shard.
    a.insert(a.end(), {"--num-shards", std::to_string(shards), "--shard",
                       std::to_string(i == 0 ? 0 : i - 1), "--identity", p.dir + "/identity.key",
                       "--metrics", p.dir + "/metrics.jsonl", "--checkpoint-dir", p.dir + "/ckpt"});
    if (i == 0) {
      p.listen = server;
      a.insert(a.end(), {"--fedavg-server", "--listen", server});
    } else {
      a.insert(a.end(), {"--fedavg-server-addr", server});
    }
    bool help = false;
    try {
      p.config = parse_peer_args(a, &help);
      // The server's progress (the live table, the summary) counts rounds as its epochs.
      if (i == 0) {
        a.insert(a.end(), {"--epochs", std::to_string(p.config.fedavg.rounds)});
        p.config = parse_peer_args(a, &help);
      }
    } catch (const UsageError& e) {
      throw UsageError("peer " + std::to_string(i) + (i == 0 ? " (the server)" : "") + ": " +
                       e.what());
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

std::vector<std::string> fedavg_restart_args(int i) {
  // A restarted server resumes from its checkpoint and waits for the clients that redial it (they
  // back off to a few seconds between dials), but not for those churn has taken down.
  if (i == 0) return {"--min-clients-timeout", "10"};
  return {};
}

}  // namespace gossiptrain::apps
