// The relative int4 wire (`--wire int4-rel`): 4 bits a value whose step follows how far the two
// partners are apart, not how large the values are (docs/communication.md, "Relative int4").
//
// Each block of 256 values has a step d. The sender sends q mod 16 of q = round(y / d); the
// receiver, who holds its own snapshot s close to y, takes the q of that residue nearest to
// round(s / d). That is right while |y - s| <= 6.5 d in every value, so d is set from how far
// past partners were (the block's largest |r - s| at the last exchanges, times a margin) instead
// of max|y| / 7: the rounding then scales with the disagreement, which shrinks as the peers
// agree. The estimates start at 0 (the finest step), so a peer's first exchanges fail until the
// blocks that did not decode have widened. A 32-bit hash of the block's q tells the receiver whether it recovered them all; a
// block whose step would not be finer than plain int4's is sent as plain int4 (its step
// negative), which decodes without the receiver's snapshot. Compression with side information
// at the receiver: Wyner-Ziv; for distributed mean estimation, Davies et al. (ICLR 2021,
// lattice quantization decoded against the receiver's own vector) and Mayekar et al.
// (AISTATS 2021).
//
// Layout for n values in B = ceil(n / 256) blocks: B fp32 steps, B uint32 hashes, ceil(n / 2)
// bytes of 4-bit residues (two a byte, the first in the low bits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gossiptrain::gossip {

class RelativeWire {
 public:
  // A partner up to kMargin times a block's estimated distance away still decodes it. Measured:
  // 2 keeps the loop stable; at 2.5 and 3 the coarser steps' noise widened the estimates that set
  // them until every block was plain int4 (docs/communication.md, "Relative int4").
  static constexpr float kMargin = 2.0f;
  // An exchange replaces a block's estimate by max(what it observed, kDecay * the old one): the
  // estimate follows the farthest recent partner and shrinks as the swarm agrees.
  static constexpr float kDecay = 0.95f;
  // A block that did not decode here widens its estimate this much; a partner's report that our
  // vector did not decode (it cannot say which blocks) widens every estimate kWidenAll.
  static constexpr float kWiden = 8.0f;
  static constexpr float kWidenAll = 2.0f;
  // The finest step, relative to the block's largest value: 2^-12.
  static constexpr float kFinest = 1.0f / 4096.0f;

  static std::size_t encoded_size(std::size_t n);

  explicit RelativeWire(std::size_t n = 0) { resize(n); }
  void resize(std::size_t n);

  // Encodes y (n values) into out (encoded_size(n) bytes) and writes what it decodes to into s,
  // bit for bit what the partner will decode.
  void encode(const float* y, std::uint8_t* out, float* s);
  // Decodes a partner's vector (of our n values) against our snapshot side into r. False when a
  // block does not decode (its hash differs: the partner is further than its step allows), or a
  // value would not be finite; r is then unspecified, and widen() widens those blocks.
  bool decode(const std::uint8_t* in, const float* side, float* r);

  // A successful decode: each block's estimate becomes max(its largest |r - s|, kDecay * old).
  void observe(const float* r, const float* s);
  // After a failed decode here: the blocks that failed, kWiden (from at least the finest step's
  // distance); after a partner's: every block, kWidenAll.
  void widen();
  void widen_all();

 private:
  std::size_t n_ = 0;
  std::vector<float> est_;   // per block: the distance to cover (0 at first: the finest step)
  std::vector<float> peak_;  // per block: max |y| at the last encode
  std::vector<std::size_t> failed_;  // blocks the last decode could not recover
};

}  // namespace gossiptrain::gossip
