// Notices a peer that cannot average: every exchange failing for a while (a wrong advertised
// address, a firewall, a network key that differs) would otherwise leave it training alone with no
// sign but a debug line per failure.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "net/transport.hpp"

namespace gossiptrain::gossip {

struct ExchangeHealthConfig {
  int min_failures = 20;           // failures in a row ...
  net::Millis min_duration{30000};  // ... spanning at least this long from the first of them
};

// What the run of failures looked like when it was reported.
struct ExchangeAlert {
  int failures = 0;                 // in a row
  net::Millis duration{0};          // since the first of them
  std::string reason;               // the most common reason among them
  std::string addr;                 // the address most often dialled among them ("" unknown)
  std::map<std::string, int> by_reason;
};

// Fed every finished exchange (both roles), on one thread. Reports a run of failures once, when
// it reaches both thresholds, and reports the first success after that as the recovery.
class ExchangeHealth {
 public:
  explicit ExchangeHealth(ExchangeHealthConfig cfg = {}) : cfg_(cfg) {}

  enum class Change { None, Failing, Recovered };
  // addr: the address dialled for this exchange ("" when unknown, e.g. a responder's partner).
  Change on_result(bool ok, const std::string& reason, const std::string& addr, net::Millis now);
  // The current run of failures (meaningful after Failing, and until the next success).
  ExchangeAlert alert() const;
  bool failing() const { return reported_; }

 private:
  ExchangeHealthConfig cfg_;
  int failures_ = 0;
  net::Millis first_failure_{0};
  net::Millis last_failure_{0};
  std::map<std::string, int> reasons_;
  std::map<std::string, int> addrs_;
  bool reported_ = false;
};

}  // namespace gossiptrain::gossip
