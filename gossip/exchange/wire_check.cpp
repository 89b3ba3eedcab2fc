#include "gossip/exchange/wire_check.hpp"

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "kernels/backend.hpp"

namespace gossiptrain::gossip {

namespace {
constexpr std::uint32_t kF32Exp = 0x7f800000u;
constexpr std::uint16_t kF16Exp = 0x7c00u;
constexpr std::uint16_t kBf16Exp = 0x7f80u;
// The largest block scale whose 127 multiple is finite: decoding can never overflow (int8's codes
// reach 127, int4's 8, int2's 2).
constexpr float kMaxInt8Scale = FLT_MAX / 127.0f;

// True when no value among n Words has every bit of exp set (an infinity or a NaN).
template <typename Word>
bool no_all_ones_exponent(const std::uint8_t* p, std::size_t n, Word exp) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Word w;
    std::memcpy(&w, p + sizeof(Word) * i, sizeof(Word));
    bad |= (w & exp) == exp;
  }
  return bad == 0;
}
}  // namespace

WireChecker::WireChecker(WireFormat wire, std::size_t n_params) : wire_(wire) {
  switch (wire) {
    case WireFormat::Fp32:
      value_bytes_ = 4;
      checked_bytes_ = n_params * 4;
      break;
    case WireFormat::Fp16:
    case WireFormat::Bf16:
      value_bytes_ = 2;
      checked_bytes_ = n_params * 2;
      break;
    case WireFormat::Int8:  // the fp32 block scales come first
    case WireFormat::Int4:
    case WireFormat::Int2:
    case WireFormat::Int4Rel:  // its block steps (then hashes, unchecked: a wrong one fails
                               // the decode, gossip/exchange/relative_wire.hpp)
      value_bytes_ = 4;
      checked_bytes_ = (n_params + kernels::kInt8BlockSize - 1) / kernels::kInt8BlockSize * 4;
      break;
  }
}

bool WireChecker::check_value(const std::uint8_t* p) const { return check_run(p, 1); }

// One branch-free pass per run, which GCC vectorizes at -O3 (see gossip/CMakeLists.txt): the
// check trails the decryption of each chunk while the chunk is still in cache.
bool WireChecker::check_run(const std::uint8_t* p, std::size_t values) const {
  if (value_bytes_ == 2)
    return no_all_ones_exponent<std::uint16_t>(p, values,
                                               wire_ == WireFormat::Fp16 ? kF16Exp : kBf16Exp);
  if (is_blockwise(wire_)) {
    for (std::size_t i = 0; i < values; ++i) {
      float s;
      std::memcpy(&s, p + 4 * i, 4);
      if (!(s >= -kMaxInt8Scale && s <= kMaxInt8Scale)) return false;  // NaN fails both
    }
    return true;
  }
  return no_all_ones_exponent<std::uint32_t>(p, values, kF32Exp);
}

bool WireChecker::feed(const std::uint8_t* data, std::size_t len) {
  if (!ok_) return false;
  const std::size_t start = fed_;
  fed_ += len;
  if (start >= checked_bytes_) return true;
  len = std::min(len, checked_bytes_ - start);
  // Finish a value split by the previous feed.
  if (carry_n_) {
    const std::size_t take = std::min(len, value_bytes_ - carry_n_);
    std::memcpy(carry_ + carry_n_, data, take);
    carry_n_ += take;
    data += take;
    len -= take;
    if (carry_n_ < value_bytes_) return true;
    carry_n_ = 0;
    if (!check_value(carry_)) return ok_ = false;
  }
  const std::size_t values = len / value_bytes_;
  if (!check_run(data, values)) return ok_ = false;
  carry_n_ = len - values * value_bytes_;
  std::memcpy(carry_, data + values * value_bytes_, carry_n_);
  return true;
}

}  // namespace gossiptrain::gossip
