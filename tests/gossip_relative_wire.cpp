// The relative int4 wire's codec (gossip/exchange/relative_wire.hpp): what decodes, what is
// caught, and how the steps follow the partners.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gossip/exchange/relative_wire.hpp"
#include "gossip/exchange/wire_check.hpp"
#include "gossip/exchange/wire_format.hpp"

using gossiptrain::gossip::RelativeWire;
using gossiptrain::gossip::WireChecker;
using gossiptrain::gossip::WireFormat;

namespace {

std::vector<float> normal(std::size_t n, std::uint32_t seed, float sd) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float step_of(const std::vector<std::uint8_t>& enc, std::size_t block) {
  float f;
  std::memcpy(&f, enc.data() + 4 * block, 4);
  return f;
}

// A sender and a receiver whose values differ by N(0, spread) around the same N(0, 1) vector,
// the sender's estimates set by one exchange that observed that spread.
struct Pair {
  std::size_t n;
  std::vector<float> y, side;
  RelativeWire tx{0}, rx{0};
  Pair(std::size_t n_, float spread) : n(n_), y(normal(n_, 1, 1.0f)), side(y), tx(n_), rx(n_) {
    const auto d = normal(n, 2, spread);
    for (std::size_t i = 0; i < n; ++i) side[i] += d[i];
    tx.observe(side.data(), y.data());
  }
  std::vector<std::uint8_t> encode(std::vector<float>& s) {
    std::vector<std::uint8_t> enc(RelativeWire::encoded_size(n));
    s.assign(n, 0.0f);
    tx.encode(y.data(), enc.data(), s.data());
    return enc;
  }
};

}  // namespace

TEST_CASE("int4-rel: its size, and decodes bit for bit what the sender kept", "[gossip]") {
  for (std::size_t n : {1u, 255u, 256u, 257u, 5001u}) {
    INFO("n " << n);
    CHECK(RelativeWire::encoded_size(n) ==
          gossiptrain::gossip::encoded_size(WireFormat::Int4Rel, n));
    CHECK(RelativeWire::encoded_size(n) == (n + 255) / 256 * 8 + (n + 1) / 2);
    Pair p(n, 1e-3f);
    std::vector<float> s, r(n);
    const auto enc = p.encode(s);
    REQUIRE(p.rx.decode(enc.data(), p.side.data(), r.data()));
    CHECK(std::memcmp(r.data(), s.data(), n * sizeof(float)) == 0);
    // Relative steps: far finer than plain int4's max|y| / 7 (~0.4 for N(0, 1) blocks).
    CHECK(step_of(enc, 0) > 0.0f);
    CHECK(step_of(enc, 0) < 2e-3f);
    double worst = 0;  // the error in steps of the value's block: at most half of one
    for (std::size_t i = 0; i < n; ++i)
      worst = std::max(worst, double(std::fabs(s[i] - p.y[i]) / step_of(enc, i / 256)));
    CHECK(worst <= 0.5001);
  }
}

TEST_CASE("int4-rel: a partner further than the step allows is caught by the block hash",
          "[gossip]") {
  const std::size_t n = 1024;  // 4 blocks
  Pair p(n, 1e-3f);
  std::vector<float> s, r(n);
  const auto enc = p.encode(s);
  auto far = p.side;
  far[300] += 1.0f;  // block 1 only, hundreds of steps away
  CHECK_FALSE(p.rx.decode(enc.data(), far.data(), r.data()));
  // Widening touches the failed block only: the receiver's next steps there are coarser.
  std::vector<float> s2(n);
  std::vector<std::uint8_t> before(enc.size()), after(enc.size());
  p.rx.observe(p.y.data(), p.side.data());
  RelativeWire probe = p.rx;
  probe.encode(p.side.data(), before.data(), s2.data());
  CHECK_FALSE(p.rx.decode(enc.data(), far.data(), r.data()));
  p.rx.widen();
  p.rx.encode(p.side.data(), after.data(), s2.data());
  CHECK(step_of(after, 1) == Approx(step_of(before, 1) * RelativeWire::kWiden));
  CHECK(step_of(after, 0) == step_of(before, 0));
  CHECK(step_of(after, 2) == step_of(before, 2));
  // widen_all (a partner's report): every block.
  p.rx.widen_all();
  p.rx.encode(p.side.data(), after.data(), s2.data());
  CHECK(step_of(after, 0) == Approx(step_of(before, 0) * RelativeWire::kWidenAll));
}

TEST_CASE("int4-rel: plain blocks decode without the receiver's values, and zero blocks are zero",
          "[gossip]") {
  const std::size_t n = 600;
  auto y = normal(n, 3, 1.0f);
  for (std::size_t i = 256; i < 512; ++i) y[i] = 0.0f;
  RelativeWire tx(n), rx(n);
  tx.observe(normal(n, 4, 10.0f).data(), y.data());  // partners far: every block plain
  std::vector<std::uint8_t> enc(RelativeWire::encoded_size(n));
  std::vector<float> s(n), r(n);
  tx.encode(y.data(), enc.data(), s.data());
  CHECK(step_of(enc, 0) < 0.0f);  // negative: plain int4
  CHECK(std::signbit(step_of(enc, 1)));
  const auto garbage = normal(n, 5, 100.0f);
  REQUIRE(rx.decode(enc.data(), garbage.data(), r.data()));
  CHECK(std::memcmp(r.data(), s.data(), n * sizeof(float)) == 0);
  for (std::size_t i = 256; i < 512; ++i) CHECK(r[i] == 0.0f);
}

TEST_CASE("int4-rel: hostile vectors never decode to a wrong or non-finite value", "[gossip]") {
  const std::size_t n = 512;
  Pair p(n, 1e-3f);
  std::vector<float> s, r(n);
  const auto good = p.encode(s);
  auto with_step = [&](float f) {
    auto b = good;
    std::memcpy(b.data(), &f, 4);
    return b;
  };
  WireChecker ok(WireFormat::Int4Rel, n);
  CHECK(ok.feed(good.data(), good.size()));
  for (float f : {std::nanf(""), INFINITY, -INFINITY, FLT_MAX / 200.0f, 1e-30f}) {
    INFO("step " << f);
    const auto b = with_step(f);
    CHECK_FALSE(p.rx.decode(b.data(), p.side.data(), r.data()));
    // The protocol thread's check already stops the non-finite ones as the chunks arrive.
    WireChecker c(WireFormat::Int4Rel, n);
    CHECK(c.feed(b.data(), b.size()) == std::isfinite(f));
  }
  auto b = good;  // one code changed: the hash no longer matches
  b[16 + 10] ^= 0x01;
  CHECK_FALSE(p.rx.decode(b.data(), p.side.data(), r.data()));
  b = good;  // one hash changed
  b[8] ^= 0x80;
  CHECK_FALSE(p.rx.decode(b.data(), p.side.data(), r.data()));
  REQUIRE(p.rx.decode(good.data(), p.side.data(), r.data()));
  for (float v : r) CHECK(std::isfinite(v));
}
