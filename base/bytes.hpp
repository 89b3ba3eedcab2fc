// The one little-endian byte codec of the wire formats (handshake, frames, membership, exchange,
// catch-up). ByteWriter appends fields to a buffer; ByteReader reads them back, checking every
// length before it touches a byte, and refuses anything malformed with DecodeError. put_le/get_le
// read and write a field in place, for fixed-layout headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gossiptrain::base {

// A message from the wire that is not well-formed. Its what() is the reason, for the log line
// that precedes closing the connection.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The low n bytes of v at p, least significant first.
inline void put_le(std::uint8_t* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline std::uint64_t get_le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

inline void put_u16(std::uint8_t* p, std::uint16_t v) { put_le(p, v, 2); }
inline void put_u32(std::uint8_t* p, std::uint32_t v) { put_le(p, v, 4); }
inline void put_u64(std::uint8_t* p, std::uint64_t v) { put_le(p, v, 8); }
inline std::uint16_t get_u16(const std::uint8_t* p) { return std::uint16_t(get_le(p, 2)); }
inline std::uint32_t get_u32(const std::uint8_t* p) { return std::uint32_t(get_le(p, 4)); }
inline std::uint64_t get_u64(const std::uint8_t* p) { return get_le(p, 8); }

// An IEEE double as its 64-bit pattern, little-endian.
inline void put_f64(std::uint8_t* p, double d) {
  std::uint64_t v = 0;
  std::memcpy(&v, &d, 8);
  put_u64(p, v);
}
inline double get_f64(const std::uint8_t* p) {
  const std::uint64_t v = get_u64(p);
  double d = 0;
  std::memcpy(&d, &v, 8);
  return d;
}

class ByteWriter {
 public:
  explicit ByteWriter(std::size_t reserve = 0) { b_.reserve(reserve); }
  void u8(std::uint8_t v) { b_.push_back(v); }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void f64(double d) {
    std::uint64_t v = 0;
    std::memcpy(&v, &d, 8);
    u64(v);
  }
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  // A string behind a one-byte length; one longer than max (at most 255) is a caller's bug.
  void str8(std::string_view s, std::size_t max) {
    if (s.size() > max || s.size() > 255)
      throw std::invalid_argument("encode: string of " + std::to_string(s.size()) +
                                  " bytes exceeds " + std::to_string(max));
    u8(static_cast<std::uint8_t>(s.size()));
    bytes(s.data(), s.size());
  }
  std::size_t size() const { return b_.size(); }
  std::vector<std::uint8_t> take() { return std::move(b_); }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::uint8_t> b_;
};

class ByteReader {
 public:
  ByteReader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  explicit ByteReader(const std::vector<std::uint8_t>& b) : ByteReader(b.data(), b.size()) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  double f64() {
    const std::uint64_t v = u64();
    double d = 0;
    std::memcpy(&d, &v, 8);
    return d;
  }
  // n bytes in place (valid while the buffer is); DecodeError when fewer remain.
  const std::uint8_t* bytes(std::size_t n) {
    need(n);
    const std::uint8_t* p = p_ + pos_;
    pos_ += n;
    return p;
  }
  // A string behind a one-byte length, refused when longer than max.
  std::string str8(std::size_t max, const char* what) {
    const std::size_t n = u8();
    if (n > max) throw DecodeError(std::string(what) + " too long");
    const auto* p = bytes(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  // Refuses a message with fewer than n bytes left (checked before allocating for a count).
  void need(std::size_t n) const {
    if (n_ - pos_ < n) throw DecodeError("truncated");
  }
  std::size_t remaining() const { return n_ - pos_; }
  std::size_t position() const { return pos_; }
  // Refuses trailing bytes.
  void end() const {
    if (pos_ != n_) throw DecodeError("trailing bytes");
  }

 private:
  std::uint64_t get(int n) {
    need(static_cast<std::size_t>(n));
    const std::uint64_t v = get_le(p_ + pos_, n);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  const std::uint8_t* p_;
  std::size_t n_;
  std::size_t pos_ = 0;
};

}  // namespace gossiptrain::base
