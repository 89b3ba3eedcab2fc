// Validation of a partner's encoded vector on the host, as its chunks stream in on the protocol
// thread: every value it decodes to must be finite. Checking the wire bytes themselves means the
// commit vote needs no step boundary of the training thread (docs/exchange.md, "Commit vote,
// all or nothing").
#pragma once

#include <cstddef>
#include <cstdint>

#include "gossip/exchange/wire_format.hpp"

namespace gossiptrain::gossip {

class WireChecker {
 public:
  // An encoded vector of n_params values (encoded_size(wire, n_params) bytes).
  WireChecker(WireFormat wire, std::size_t n_params);

  // Checks the next len bytes of the vector, which may split values anywhere. Returns false once
  // any complete value so far decodes to a NaN or an infinity (and from then on).
  //  fp32: every value finite. fp16, bf16: no all-ones exponent.
  //  int8, int4, int2: every block scale finite and small enough that scale * 127 is finite; the
  //        codes themselves cannot decode to anything but finite values.
  bool feed(const std::uint8_t* data, std::size_t len);

  std::size_t bytes_fed() const { return fed_; }

 private:
  bool check_value(const std::uint8_t* p) const;
  bool check_run(const std::uint8_t* p, std::size_t values) const;

  WireFormat wire_;
  std::size_t checked_bytes_;  // the prefix of the vector holding values to check
  std::size_t value_bytes_;    // bytes per checked value (4 or 2)
  std::size_t fed_ = 0;
  std::uint8_t carry_[4] = {};  // the first bytes of a value split between two feeds
  std::size_t carry_n_ = 0;
  bool ok_ = true;
};

}  // namespace gossiptrain::gossip
