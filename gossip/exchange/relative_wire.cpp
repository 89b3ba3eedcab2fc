// The relative int4 wire (see relative_wire.hpp).
#include "gossip/exchange/relative_wire.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/backend.hpp"
#include "kernels/float_convert.hpp"

namespace gossiptrain::gossip {

namespace {
constexpr std::size_t kBlock = kernels::kInt8BlockSize;
// |q| above this is refused on decode: every such q is exact in a float, so float(q) * d is the
// same number on both sides.
constexpr double kMaxCode = 4194304.0;  // 2^22
// A value may be 6.5 steps from the receiver's and still decode (round(y/d) and round(s/d) then
// differ by at most 7, which a residue mod 16 in [-8, 7] identifies).
constexpr float kReach = 6.5f;

std::size_t blocks(std::size_t n) { return (n + kBlock - 1) / kBlock; }

// FNV-1a over the 32-bit codes: a change of any one code always changes the hash.
struct Hash {
  std::uint32_t h = 2166136261u;
  void add(std::int64_t q) { h = (h ^ static_cast<std::uint32_t>(q)) * 16777619u; }
};

// q's low 4 bits, packed as int4's codes (value i in bits 4 (i mod 2) of byte i/2).
void put_code(std::uint8_t* codes, std::size_t i, std::int64_t q) {
  const std::uint8_t c = kernels::lowbit_code<4>(static_cast<int>(q));
  if (i % 2 == 0) codes[i / 2] = c;
  else codes[i / 2] |= static_cast<std::uint8_t>(c << 4);
}
unsigned get_code(const std::uint8_t* codes, std::size_t i) {
  return (codes[i / 2] >> (4 * (i % 2))) & 15u;
}
}  // namespace

std::size_t RelativeWire::encoded_size(std::size_t n) {
  return blocks(n) * 2 * sizeof(float) + (n + 1) / 2;  // steps, hashes, then two codes a byte
}

void RelativeWire::resize(std::size_t n) {
  n_ = n;
  est_.assign(blocks(n), 0.0f);
  peak_.assign(blocks(n), 0.0f);
}

void RelativeWire::encode(const float* y, std::uint8_t* out, float* s) {
  const std::size_t nb = blocks(n_);
  std::uint8_t* codes = out + 8 * nb;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t lo = b * kBlock, hi = std::min(n_, lo + kBlock);
    float m = 0.0f;
    for (std::size_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(y[i]));
    peak_[b] = m;
    const float plain = m / 7.0f;
    const float rel = std::max(kMargin * est_[b] / kReach, m * kFinest);
    const bool relative = rel < plain;  // false for an all-zero block, and an estimate that far
    const float d = relative ? rel : plain;
    Hash h;
    for (std::size_t i = lo; i < hi; ++i) {
      const std::int64_t q =
          d > 0.0f ? static_cast<std::int64_t>(std::nearbyint(double(y[i]) / double(d))) : 0;
      h.add(q);
      put_code(codes, i, q);
      s[i] = static_cast<float>(q) * d;
    }
    const float field = relative ? d : -d;  // negative: plain int4 (-0 for an all-zero block)
    std::memcpy(out + 4 * b, &field, 4);
    std::memcpy(out + 4 * (nb + b), &h.h, 4);
  }
}

namespace {
// One block of a partner's vector: false when its codes do not hash to what was sent, or a value
// is not finite.
bool decode_block(const std::uint8_t* codes, float field, std::uint32_t want, std::size_t lo,
                  std::size_t hi, const float* side, float* r) {
  if (!std::isfinite(field)) return false;
  const bool relative = field > 0.0f;
  const float d = std::fabs(field);
  Hash h;
  for (std::size_t i = lo; i < hi; ++i) {
    const unsigned c = get_code(codes, i);
    std::int64_t q = kernels::lowbit_value<4>(c);  // plain: two's complement, -8..7
    if (relative) {  // the q of residue c nearest to round(side / d): guess + (c - guess) in -8..7
      const double g = std::nearbyint(double(side[i]) / double(d));
      if (!(std::fabs(g) <= kMaxCode)) return false;
      const auto guess = static_cast<std::int64_t>(g);
      q = guess + kernels::lowbit_value<4>((c - static_cast<unsigned>(guess)) & 15u);
      if (std::abs(q) > static_cast<std::int64_t>(kMaxCode)) return false;
    }
    if (d == 0.0f) q = 0;
    h.add(q);
    r[i] = static_cast<float>(q) * d;
    if (!std::isfinite(r[i])) return false;
  }
  return h.h == want;
}
}  // namespace

bool RelativeWire::decode(const std::uint8_t* in, const float* side, float* r) {
  const std::size_t nb = blocks(n_);
  failed_.clear();
  for (std::size_t b = 0; b < nb; ++b) {
    float field;
    std::uint32_t want;
    std::memcpy(&field, in + 4 * b, 4);
    std::memcpy(&want, in + 4 * (nb + b), 4);
    const std::size_t lo = b * kBlock, hi = std::min(n_, lo + kBlock);
    if (!decode_block(in + 8 * nb, field, want, lo, hi, side, r)) failed_.push_back(b);
  }
  return failed_.empty();
}

void RelativeWire::observe(const float* r, const float* s) {
  for (std::size_t b = 0; b < est_.size(); ++b) {
    const std::size_t lo = b * kBlock, hi = std::min(n_, lo + kBlock);
    float far = 0.0f;
    for (std::size_t i = lo; i < hi; ++i) far = std::max(far, std::fabs(r[i] - s[i]));
    const float old = kDecay * est_[b];
    est_[b] = std::max(far, old);
  }
}

namespace {
float widened(float est, float peak, float factor) {
  return std::max(est, peak * RelativeWire::kFinest * kReach / RelativeWire::kMargin) * factor;
}
}  // namespace

void RelativeWire::widen() {
  for (std::size_t b : failed_) est_[b] = widened(est_[b], peak_[b], kWiden);
  failed_.clear();
}

void RelativeWire::widen_all() {
  for (std::size_t b = 0; b < est_.size(); ++b) est_[b] = widened(est_[b], peak_[b], kWidenAll);
}

}  // namespace gossiptrain::gossip
