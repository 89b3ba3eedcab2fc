// The wire of each exchange by partner (docs/communication.md, "A compressed wire for a slow
// link"): fp32 (the configured wire) with every partner, except a partner whose link is measured
// slow, with whom exchanges go in a compressed wire (int8 with error feedback) instead. The
// initiator proposes a partner's wire in its REQUEST, the responder takes either wire, so both
// sides of an exchange use the same one. One per ExchangeProtocol, on the protocol thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "gossip/exchange/wire_format.hpp"

namespace gossiptrain::gossip {

struct LinkWireConfig {
  // The wire of a slow link; nullopt: every exchange in the configured wire (no adaptation).
  std::optional<WireFormat> slow_wire;
  // A link is slow when an exchange in the configured wire moves fewer bytes a second (both ways
  // together, from its transfer's start to its commit) than this. A 10 Mbit/s link carries at most
  // 2.5 MB/s both ways (its fp32 exchanges measured 1.6-2.2 MB/s); in the same 9-peer run on a
  // 2-core machine at load 19-26, no pair of the others measured under it (docs/communication.md).
  double slow_bytes_per_s = 4e6;
  // A partner's rate: an exponential moving average of its measured exchanges, the newest
  // weighted alpha (the first one taken as it is).
  double alpha = 0.5;
  // A slow partner is measured again (one exchange in the configured wire) this long after it
  // was found slow: the compressed exchanges are too small to tell the link's rate.
  std::chrono::milliseconds recheck{60000};
  // Exchanges moving fewer bytes than this say nothing about the link (a quick failure).
  std::uint64_t min_bytes = 64 * 1024;
};

class LinkWire {
 public:
  using Millis = std::chrono::milliseconds;
  LinkWire(LinkWireConfig cfg, WireFormat wire) : cfg_(cfg), wire_(wire) {}

  bool enabled() const { return cfg_.slow_wire.has_value(); }
  // The configured wire changed (the finish wire; never with a slow wire).
  void set_wire(WireFormat w) { wire_ = w; }
  WireFormat wire() const { return wire_; }
  // The wire of our next exchange with partner.
  WireFormat wire_for(const std::string& partner, Millis now) const;
  // Whether we take a request in wire w (the configured one, or the slow one when enabled).
  bool takes(WireFormat w) const { return w == wire_ || (enabled() && w == *cfg_.slow_wire); }
  // An exchange with partner in wire w moved bytes (both ways) in ms, from its transfer's start
  // (committed, or a transfer that timed out). Only the configured wire's measure the link.
  // True when this made the partner slow.
  bool record(const std::string& partner, WireFormat w, std::uint64_t bytes, double ms, Millis now);
  // partner refused our slow wire (it does not adapt): the configured wire with it from now on.
  void refused(const std::string& partner) { links_[partner].refused = true; }
  // The measured rate (bytes/s) of partner's link, or -1.
  double rate(const std::string& partner) const;
  bool slow(const std::string& partner) const;

 private:
  struct Link {
    double rate = -1;  // bytes/s
    bool slow = false;
    bool refused = false;
    Millis slow_since{0};
  };
  static constexpr std::size_t kMaxLinks = 4096;  // a bound on the state kept per partner
  LinkWireConfig cfg_;
  WireFormat wire_;
  std::unordered_map<std::string, Link> links_;
};

}  // namespace gossiptrain::gossip
