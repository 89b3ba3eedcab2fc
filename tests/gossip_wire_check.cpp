// WireChecker: the protocol thread's check of a partner's encoded vector, fed in pieces that split
// values anywhere.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gossip/exchange/wire_check.hpp"
#include "kernels/cpu/cpu_backend.hpp"

using namespace gossiptrain;
using gossip::WireChecker;
using Wire = gossip::WireFormat;

namespace {

std::vector<std::uint8_t> encode(Wire w, const std::vector<float>& x) {
  kernels::CpuBackend be;
  std::vector<std::uint8_t> out(gossip::encoded_size(w, x.size()));
  be.encode(*gossip::backend_wire(w), x.data(), x.size(), out.data());
  return out;
}

// Feeds bytes in random pieces (1 byte up to ~3 KB); returns the last feed's answer.
bool feed_in_pieces(WireChecker& c, const std::vector<std::uint8_t>& b, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  bool ok = true;
  for (std::size_t off = 0; off < b.size();) {
    const std::size_t len = std::min<std::size_t>(b.size() - off, 1 + rng() % 3000);
    ok = c.feed(b.data() + off, len);
    off += len;
  }
  return ok;
}

std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> N(0.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = N(rng);
  return x;
}

}  // namespace

TEST_CASE("wire check: every encoding of a finite vector passes, however it is split", "[gossip]") {
  const std::size_t n = 5001;  // not a multiple of the block, nor of an int4 or int2 byte
  const auto x = random_vector(n, 1);
  for (Wire w : {Wire::Fp32, Wire::Fp16, Wire::Bf16, Wire::Int8, Wire::Int4, Wire::Int2}) {
    INFO(gossip::wire_name(w));
    const auto b = encode(w, x);
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      WireChecker c(w, n);
      CHECK(feed_in_pieces(c, b, seed));
      CHECK(c.bytes_fed() == b.size());
    }
    WireChecker bytewise(w, n);
    bool ok = true;
    for (std::uint8_t v : b) ok = bytewise.feed(&v, 1) && ok;
    CHECK(ok);
  }
}

TEST_CASE("wire check: a NaN or an infinity anywhere is caught, even split across pieces",
          "[gossip]") {
  const std::size_t n = 3000;
  const float bad_values[] = {std::nanf(""), INFINITY, -INFINITY};
  for (Wire w : {Wire::Fp32, Wire::Fp16, Wire::Bf16}) {
    for (float bad : bad_values) {
      for (std::size_t at : {std::size_t(0), std::size_t(1), std::size_t(1234), n - 1}) {
        INFO(gossip::wire_name(w) << " value " << bad << " at " << at);
        auto x = random_vector(n, 2);
        x[at] = bad;
        const auto b = encode(w, x);
        for (std::uint64_t seed = 0; seed < 5; ++seed) {
          WireChecker c(w, n);
          CHECK_FALSE(feed_in_pieces(c, b, seed));
        }
        // Every later feed keeps the refusal.
        WireChecker c(w, n);
        c.feed(b.data(), b.size());
        std::uint8_t zero = 0;
        CHECK_FALSE(c.feed(&zero, 1));
      }
    }
  }
  SECTION("fp16: a finite fp32 value beyond the fp16 range is infinite on the wire") {
    auto x = random_vector(n, 3);
    x[17] = 1e6f;
    WireChecker c(Wire::Fp16, n);
    CHECK_FALSE(c.feed(encode(Wire::Fp16, x).data(), gossip::encoded_size(Wire::Fp16, n)));
  }
}

TEST_CASE("wire check: int8, int4 and int2 block scales must be finite and small enough to decode "
          "finitely",
          "[gossip]") {
  const Wire w = GENERATE(Wire::Int8, Wire::Int4, Wire::Int2);
  INFO(gossip::wire_name(w));
  const std::size_t n = 1000;  // 4 blocks of 256: 16 bytes of scales, then the codes
  const auto good = encode(w, random_vector(n, 4));
  auto with_scale = [&](std::size_t block, float s) {
    auto b = good;
    std::memcpy(b.data() + 4 * block, &s, 4);
    return b;
  };
  for (float s : {std::nanf(""), INFINITY, -INFINITY, FLT_MAX, -FLT_MAX / 100.0f}) {
    INFO("scale " << s);
    WireChecker c(w, n);
    CHECK_FALSE(feed_in_pieces(c, with_scale(3, s), 9));
  }
  WireChecker fine(w, n);
  CHECK(feed_in_pieces(fine, with_scale(2, FLT_MAX / 128.0f), 9));
  // The codes after the scales decode finitely whatever they are (int4 -8, int2 -2 included).
  auto b = good;
  for (std::size_t i = 16; i < b.size(); ++i) b[i] = 0x80;
  WireChecker any(w, n);
  CHECK(any.feed(b.data(), b.size()));
  // ... and do decode finitely, at the largest scale the check lets through.
  const float big = FLT_MAX / 128.0f;
  for (std::size_t k = 0; k < 4; ++k) std::memcpy(b.data() + 4 * k, &big, 4);
  WireChecker big_ok(w, n);
  CHECK(big_ok.feed(b.data(), b.size()));
  std::vector<float> y(n);
  kernels::CpuBackend().decode(*gossip::backend_wire(w), b.data(), n, y.data());
  for (float v : y) REQUIRE(std::isfinite(v));
}
