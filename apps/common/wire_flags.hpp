// gossip::WireFormat as flag values (Options::named): --wire, --finish-wire, --slow-link-wire and
// gossip-bench average's --wire, each spelled as gossip::wire_name spells it, so that a flag table
// reads them into the typed value once.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gossip/exchange/wire_format.hpp"

namespace gossiptrain::apps {

inline std::vector<std::pair<std::string, gossip::WireFormat>> wire_values() {
  std::vector<std::pair<std::string, gossip::WireFormat>> v;
  for (auto w : gossip::kWireFormats) v.emplace_back(std::string(gossip::wire_name(w)), w);
  return v;
}

}  // namespace gossiptrain::apps
