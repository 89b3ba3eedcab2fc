// The encodings of a parameter vector between two peers (--wire): the backends' (kernels::Wire)
// and int4-rel, which only the averager encodes, against the receiver's own snapshot
// (relative_wire.hpp). Each is numbered as the wire byte of a REQUEST (docs/protocol.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/backend.hpp"

namespace gossiptrain::gossip {

enum class WireFormat : std::uint8_t {
  Fp32 = 0,
  Fp16 = 1,
  Bf16 = 2,
  Int8 = 3,
  Int4 = 4,
  Int2 = 5,
  Int4Rel = 6,
};
// Every format, in wire-byte order (flag tables, tests).
inline constexpr WireFormat kWireFormats[] = {
    WireFormat::Fp32, WireFormat::Fp16, WireFormat::Bf16,   WireFormat::Int8,
    WireFormat::Int4, WireFormat::Int2, WireFormat::Int4Rel};

// The backend encoding that produces w's bytes; none for int4-rel (the averager's, on the host).
constexpr std::optional<kernels::Wire> backend_wire(WireFormat w) {
  switch (w) {
    case WireFormat::Fp32: return kernels::Wire::Fp32;
    case WireFormat::Fp16: return kernels::Wire::Fp16;
    case WireFormat::Bf16: return kernels::Wire::Bf16;
    case WireFormat::Int8: return kernels::Wire::Int8;
    case WireFormat::Int4: return kernels::Wire::Int4;
    case WireFormat::Int2: return kernels::Wire::Int2;
    case WireFormat::Int4Rel: break;
  }
  return std::nullopt;
}
// The blockwise formats: fp32 block scales (int4-rel: steps) come first, then the packed codes.
constexpr bool is_blockwise(WireFormat w) {
  return w == WireFormat::Int4Rel || kernels::is_blockwise(*backend_wire(w));
}
// Bytes of one value of an element-wise format: 4 (fp32), 2 (fp16, bf16); the blockwise ones: 1.
constexpr std::size_t wire_value_bytes(WireFormat w) {
  return w == WireFormat::Int4Rel ? 1 : kernels::wire_value_bytes(*backend_wire(w));
}
// Bytes of n values in w (docs/exchange.md, "Wire encodings").
std::size_t encoded_size(WireFormat w, std::size_t n);

// The flag spelling: "fp32", "fp16", "bf16", "int8", "int4", "int2", "int4-rel".
std::string_view wire_name(WireFormat w);
// The format a flag spelling names; none for any other text.
std::optional<WireFormat> wire_from_name(std::string_view name);

}  // namespace gossiptrain::gossip
