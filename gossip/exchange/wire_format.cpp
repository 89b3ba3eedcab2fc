// The wire formats' sizes and names (see wire_format.hpp): the backends' own, and int4-rel's.
#include "gossip/exchange/wire_format.hpp"

#include "gossip/exchange/relative_wire.hpp"

namespace gossiptrain::gossip {

std::size_t encoded_size(WireFormat w, std::size_t n) {
  if (auto k = backend_wire(w)) return kernels::encoded_size(*k, n);
  return RelativeWire::encoded_size(n);
}

std::string_view wire_name(WireFormat w) {
  if (auto k = backend_wire(w)) return kernels::wire_name(*k);
  return w == WireFormat::Int4Rel ? "int4-rel" : "unknown";
}

std::optional<WireFormat> wire_from_name(std::string_view name) {
  for (WireFormat w : kWireFormats)
    if (wire_name(w) == name) return w;
  return std::nullopt;
}

}  // namespace gossiptrain::gossip
