// gossip-peer's FedAvg flags: one table appended to the peer's, and their cross-checks.
#include <string>

#include "apps/common/options.hpp"

namespace gossiptrain::apps {

void add_fedavg_options(std::vector<Option<PeerConfig>>& options) {
  using O = Options<PeerConfig>;
  auto fa = [](auto field) { return field_of(&PeerConfig::fedavg, field); };
  std::vector<Option<PeerConfig>> more = {
      O::flag("fedavg-server",
              "run a FedAvg server instead of a gossip peer: clients dial its --listen address; "
              "it samples clients each round, sends them the global model and averages what "
              "they send back, weighted by their sample counts",
              fa(&FedAvgOptions::server)),
      Option<PeerConfig>{"fedavg-server-addr", "HOST:PORT",
       "run as a FedAvg client of the server at HOST:PORT, training each round's global model on "
       "this peer's shard",
       [](PeerConfig& c, const std::string& v) {
         check_host_port(v, "fedavg-server-addr", AddrUse::Dial);
         c.fedavg.server_addr = v;
       }}.unset_means("none: not a FedAvg client").of_kind(ValueKind::Text),
      O::number("rounds", "R", "FedAvg server: rounds to run",
                fa(&FedAvgOptions::rounds), 1, 1000000),
      Option<PeerConfig>{"clients-per-round", "N|F",
       "FedAvg server: clients asked each round, a count N >= 1 or a fraction 0 < F < 1 of the "
       "live clients",
       [](PeerConfig& c, const std::string& v) {
         const double x = to_double("clients-per-round", v, 1e-9, 1e6);
         c.fedavg.clients_fraction = x < 1.0;
         if (!c.fedavg.clients_fraction && x != static_cast<double>(static_cast<long long>(x)))
           throw bad_value("--clients-per-round", v, "an integer >= 1 or a fraction < 1");
         c.fedavg.clients_per_round = x;
       }}.shows([](PeerConfig& c) {
          const FedAvgOptions& f = c.fedavg;
          return f.clients_fraction && f.clients_per_round == 1.0 ? std::string("all")
                                                                   : show_value(f.clients_per_round);
        }).of_kind(ValueKind::Number),
      O::number("local-epochs", "E",
                "FedAvg server: passes over its own shard each client makes per round",
                fa(&FedAvgOptions::local_epochs), 1, 100000),
      O::number("local-steps", "S",
                "FedAvg server: each client takes S steps per round instead of --local-epochs "
                "passes (0: epochs)",
                fa(&FedAvgOptions::local_steps), 0, 1ll << 32),
      O::number("fedprox-mu", "MU",
                "FedAvg server: FedProx's proximal term, mu * (w - w_global) added to each "
                "client's gradient (0: plain FedAvg)",
                fa(&FedAvgOptions::fedprox_mu), 0, 1e6),
      O::number("server-momentum", "BETA",
                "FedAvg server: server momentum (FedAvgM): v = BETA v + (w - avg), w -= v "
                "(0: plain averaging)",
                fa(&FedAvgOptions::server_momentum), 0, 0.999999),
      O::seconds("round-timeout",
                 "FedAvg server: a round's deadline; clients that have not answered by then are "
                 "dropped from the round",
                 fa(&FedAvgOptions::round_timeout_s), 0.1),
      O::number("min-clients", "N",
                "FedAvg server: wait for N clients before the first round",
                fa(&FedAvgOptions::min_clients), 1, 100000),
      O::seconds("min-clients-timeout",
                 "FedAvg server: start with the clients there are after this",
                 fa(&FedAvgOptions::min_clients_timeout_s), 0),
      O::seconds("fedavg-wait",
                 "FedAvg client: keep redialling a lost or not yet started server this long, then "
                 "exit 1",
                 fa(&FedAvgOptions::client_wait_s), 0),
  };
  for (auto& o : more) options.push_back(std::move(o));
}

void check_fedavg_options(const PeerConfig& c) {
  if (c.fedavg.server && !c.fedavg.server_addr.empty())
    throw UsageError("--fedavg-server and --fedavg-server-addr exclude each other");
  if (c.fedavg.enabled() && !c.node.membership.seeds.empty())
    throw UsageError("--seeds is for gossip; a FedAvg peer talks only to its server");
  if (c.fedavg.server && !c.listen_given)
    throw UsageError("--fedavg-server needs --listen HOST:PORT for its clients to dial");
}

}  // namespace gossiptrain::apps
