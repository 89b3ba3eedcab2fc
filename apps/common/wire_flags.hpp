// gossip::WireFormat as flag values (Options::named): --wire, --finish-wire, --slow-link-wire and
// gossip-bench average's --wire, each spelled as gossip::wire_name spells it, so that every wire
// flag is read (and a bad value refused, listing what it takes) by the one parse of a named
// option, from the one name table.
#pragma once

#include <optional>
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

// A flag that may turn a wire off (--finish-wire, --slow-link-wire): "off" (none), then the
// --wire values that allowed() takes.
template <class Allowed>
std::vector<std::pair<std::string, std::optional<gossip::WireFormat>>> wire_or_off_values(
    Allowed allowed) {
  std::vector<std::pair<std::string, std::optional<gossip::WireFormat>>> v{{"off", std::nullopt}};
  for (const auto& [name, w] : wire_values())
    if (allowed(w)) v.emplace_back(name, w);
  return v;
}

}  // namespace gossiptrain::apps
