// gossip::WireFormat (gossip/exchange/wire_format.hpp): the wire byte of each format is the one
// docs/protocol.md gives, the names read back, and the sizes are docs/exchange.md's.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/bytes.hpp"
#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/exchange/relative_wire.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "kernels/backend.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;

namespace {

// The REQUEST row of docs/protocol.md: "wire u8 (0 fp32, 1 fp16, ...; any other is malformed)",
// as (byte, name) pairs.
std::vector<std::pair<int, std::string>> protocol_md_wire_bytes() {
  std::ifstream in(GT_SOURCE_DIR "/docs/protocol.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  std::smatch m;
  REQUIRE(std::regex_search(doc, m, std::regex(R"(wire u8 \(([^;)]*); any other is malformed\))")));
  std::vector<std::pair<int, std::string>> out;
  const std::string list = m[1].str();
  const std::regex entry(R"((\d+) ([a-z0-9-]+))");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), entry);
       it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stoi((*it)[1].str()), (*it)[2].str());
  return out;
}

}  // namespace

TEST_CASE("wire formats: each REQUEST carries the wire byte docs/protocol.md gives it",
          "[gossip]") {
  const auto doc = protocol_md_wire_bytes();
  REQUIRE(doc.size() == std::size(kWireFormats));  // every format, and no other
  for (const auto& [byte, name] : doc) {
    INFO("wire " << byte << " " << name);
    const auto w = wire_from_name(name);
    REQUIRE(w.has_value());
    CHECK(static_cast<int>(*w) == byte);
    RequestMsg r;
    r.wire = *w;
    const net::Bytes b = *encode_request(r);
    CHECK(int(b[25]) == byte);  // version u8, then three u64, then the wire
    CHECK(decode_request(b).wire == *w);
  }
  // The byte after the last is malformed.
  net::Bytes b = *encode_request(RequestMsg{});
  b[25] = static_cast<std::uint8_t>(doc.size());
  CHECK_THROWS_AS(decode_request(b), base::DecodeError);
}

TEST_CASE("wire formats: names read back, the backends' spelled as the kernels spell them",
          "[gossip]") {
  std::set<std::string_view> names;
  for (WireFormat w : kWireFormats) {
    INFO(wire_name(w));
    CHECK(wire_from_name(wire_name(w)) == w);
    names.insert(wire_name(w));
    if (auto k = backend_wire(w)) {
      CHECK(wire_name(w) == kernels::wire_name(*k));
      CHECK(static_cast<int>(*k) == static_cast<int>(w));
    }
  }
  CHECK(names.size() == std::size(kWireFormats));
  CHECK(wire_name(WireFormat::Int4Rel) == "int4-rel");
  CHECK_FALSE(backend_wire(WireFormat::Int4Rel).has_value());
  CHECK(wire_name(static_cast<WireFormat>(7)) == "unknown");
  for (const char* bad : {"int3", "fp8", "", "INT8", "int4rel"})
    CHECK_FALSE(wire_from_name(bad).has_value());
}

TEST_CASE("wire formats: sizes and layouts as docs/exchange.md's table", "[gossip]") {
  for (std::size_t n : {0, 1, 255, 256, 257, 258, 269322}) {
    INFO("n " << n);
    const std::size_t blocks = (n + 255) / 256;
    CHECK(encoded_size(WireFormat::Int4Rel, n) == 8 * blocks + (n + 1) / 2);
    CHECK(encoded_size(WireFormat::Int4Rel, n) == RelativeWire::encoded_size(n));
    for (WireFormat w : kWireFormats)
      if (auto k = backend_wire(w)) CHECK(encoded_size(w, n) == kernels::encoded_size(*k, n));
  }
  for (WireFormat w : kWireFormats) {
    INFO(wire_name(w));
    if (auto k = backend_wire(w)) {
      CHECK(is_blockwise(w) == kernels::is_blockwise(*k));
      CHECK(wire_value_bytes(w) == kernels::wire_value_bytes(*k));
    }
  }
  CHECK(is_blockwise(WireFormat::Int4Rel));
  CHECK(wire_value_bytes(WireFormat::Int4Rel) == 1);
}
