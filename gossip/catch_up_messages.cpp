// Encoding and checked decoding of the catch-up messages (layouts in catch_up_messages.hpp).
#include "gossip/catch_up_messages.hpp"

#include <memory>

#include "core/base/bytes.hpp"
#include "core/checkpoint.hpp"

namespace gossiptrain::gossip {

using base::ByteReader;
using base::ByteWriter;
using base::DecodeError;

std::string_view catch_up_code_name(CatchUpCode c) {
  switch (c) {
    case CatchUpCode::Fingerprint: return "fingerprint";
    case CatchUpCode::Size: return "size";
    case CatchUpCode::NotReady: return "not-ready";
    case CatchUpCode::Timeout: return "timeout";
    case CatchUpCode::Invalid: return "invalid";
    case CatchUpCode::Protocol: return "protocol";
    case CatchUpCode::Shutdown: return "shutdown";
  }
  return "unknown";
}

namespace {

net::SharedBytes finish(ByteWriter& w) { return std::make_shared<net::Bytes>(w.take()); }

ByteWriter writer(std::size_t bytes) {
  ByteWriter w(bytes);
  w.u8(kCatchUpWireVersion);
  return w;
}

// A reader past the version byte of a message that must be exactly `bytes` long.
ByteReader reader(const net::Bytes& b, std::size_t bytes, const char* what) {
  if (b.size() != bytes)
    throw DecodeError(std::string(what) + ": " + std::to_string(b.size()) + " bytes, expected " +
                      std::to_string(bytes));
  ByteReader r(b.data(), b.size());
  if (r.u8() != kCatchUpWireVersion) throw DecodeError("unsupported wire version");
  return r;
}

std::int64_t counter(ByteReader& r, const char* what) {
  const auto v = static_cast<std::int64_t>(r.u64());
  if (v < 0) throw DecodeError(std::string("negative ") + what);
  return v;
}

}  // namespace

net::SharedBytes encode_catch_up_request(const CatchUpRequestMsg& m) {
  ByteWriter w = writer(kCatchUpRequestBytes);
  w.u64(m.id);
  w.u64(m.fingerprint);
  w.u64(m.n_params);
  return finish(w);
}

net::SharedBytes encode_catch_up_header(const CatchUpHeaderMsg& m) {
  ByteWriter w = writer(kCatchUpHeaderBytes);
  w.u64(m.id);
  w.u64(m.total_bytes);
  w.u64(m.fingerprint);
  w.u64(static_cast<std::uint64_t>(m.step));
  w.u64(static_cast<std::uint64_t>(m.epoch));
  w.u64(static_cast<std::uint64_t>(m.samples));
  return finish(w);
}

net::SharedBytes encode_catch_up_end(const CatchUpEndMsg& m) {
  ByteWriter w = writer(kCatchUpEndBytes);
  w.u64(m.id);
  w.u32(m.crc32);
  return finish(w);
}

net::SharedBytes encode_catch_up_code(std::uint64_t id, CatchUpCode code) {
  ByteWriter w = writer(kCatchUpCodeBytes);
  w.u64(id);
  w.u8(static_cast<std::uint8_t>(code));
  return finish(w);
}

CatchUpRequestMsg decode_catch_up_request(const net::Bytes& b) {
  ByteReader r = reader(b, kCatchUpRequestBytes, "request");
  CatchUpRequestMsg m;
  m.id = r.u64();
  m.fingerprint = r.u64();
  m.n_params = r.u64();
  return m;
}

CatchUpHeaderMsg decode_catch_up_header(const net::Bytes& b) {
  ByteReader r = reader(b, kCatchUpHeaderBytes, "header");
  CatchUpHeaderMsg m;
  m.id = r.u64();
  m.total_bytes = r.u64();
  m.fingerprint = r.u64();
  m.step = counter(r, "step");
  m.epoch = counter(r, "epoch");
  m.samples = counter(r, "sample count");
  return m;
}

CatchUpEndMsg decode_catch_up_end(const net::Bytes& b) {
  ByteReader r = reader(b, kCatchUpEndBytes, "end");
  CatchUpEndMsg m;
  m.id = r.u64();
  m.crc32 = r.u32();
  return m;
}

CatchUpCodeMsg decode_catch_up_code(const net::Bytes& b) {
  ByteReader r = reader(b, kCatchUpCodeBytes, "code");
  CatchUpCodeMsg m;
  m.id = r.u64();
  m.code = static_cast<CatchUpCode>(r.u8());
  if (catch_up_code_name(m.code) == "unknown") throw DecodeError("unknown code");
  return m;
}

}  // namespace gossiptrain::gossip
