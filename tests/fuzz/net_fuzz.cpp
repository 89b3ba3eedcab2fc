// Fuzz target for the net/ parsers: the handshake state machine (both roles), the dial-back
// messages and the frame receiver (raw bytes, and authenticated frames with fuzzer-chosen plaintexts). libFuzzer entry
// point; fuzz_driver.cpp runs it from a seeded mutation loop where libFuzzer is not available.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "net/nat/dial_back_messages.hpp"
#include "net/secure/frame.hpp"
#include "net/secure/handshake.hpp"

using namespace gossiptrain::net;

namespace {

const Identity& fixed_identity() {
  static const Identity id = [] {
    crypto::Seed seed;
    for (std::size_t i = 0; i < seed.size(); ++i) seed.data()[i] = std::uint8_t(i + 1);
    return Identity::from_seed(seed);
  }();
  return id;
}

const crypto::SymKey& fixed_key() {
  static const crypto::SymKey k = [] {
    crypto::SymKey key;
    for (std::size_t i = 0; i < key.size(); ++i) key.data()[i] = std::uint8_t(0xA0 + i);
    return key;
  }();
  return k;
}

Limits fuzz_limits() {
  Limits l;
  l.max_frame_bytes = 4096;
  l.max_message_bytes = 1 << 20;
  l.rekey_after_frames = 5;
  return l;
}

void fuzz_handshake(Handshake::Role role, const std::uint8_t* d, std::size_t n) {
  HandshakeParams p;
  p.identity = &fixed_identity();
  p.fingerprint = 7;
  p.listen_addr = "127.0.0.1:9";
  Handshake hs(role, p);
  if (role == Handshake::Role::Initiator) hs.start();
  std::size_t off = 0;
  while (off < n && !hs.done() && !hs.failed()) {
    std::size_t want = hs.expected_bytes();
    std::size_t take = std::min(want, n - off);  // a short tail exercises the size check
    hs.on_message(std::span<const std::uint8_t>(d + off, take));
    off += take;
  }
}

// Raw stream into a receiver: header checks and authentication failures.
void fuzz_raw_frames(crypto::Aead aead, const std::uint8_t* d, std::size_t n) {
  FrameReceiver rx(aead, fixed_key(), fuzz_limits());
  std::size_t off = 0;
  while (n - off >= kFrameHeaderBytes) {
    std::size_t body = 0;
    std::string err;
    if (!rx.on_header(d + off, body, err)) return;
    off += kFrameHeaderBytes;
    if (n - off < body) return;
    auto ev = rx.on_body(d + off, body);
    off += body;
    if (ev == FrameReceiver::Event::Error || ev == FrameReceiver::Event::Close) return;
    if (ev == FrameReceiver::Event::Message) rx.take_message();
  }
}

// Input = records (frame type, u16 length, bytes, flip byte); each is sealed with the right key so
// the receiver's sequencing and reassembly logic sees authenticated, fuzzer-chosen plaintexts.
void fuzz_sealed_frames(crypto::Aead aead, const std::uint8_t* d, std::size_t n) {
  Limits l = fuzz_limits();
  FrameSealer tx(aead, fixed_key(), l);
  FrameReceiver rx(aead, fixed_key(), l);
  Bytes wire(tx.max_wire_bytes());
  std::size_t off = 0;
  while (n - off >= 4) {
    std::uint8_t type = d[off] % 7;  // 0 is invalid on purpose
    std::size_t len = std::size_t(d[off + 1]) | (std::size_t(d[off + 2]) << 8);
    std::uint8_t flip = d[off + 3];
    off += 4;
    len = std::min({len, n - off, l.max_frame_bytes});
    std::size_t w = tx.seal(FrameType(type), d + off, len, wire.data());
    off += len;
    if (flip >= 0xF0) wire[flip % w] ^= std::uint8_t(1u << (flip & 7));
    std::size_t pos = 0;
    while (pos < w) {
      std::size_t body = 0;
      std::string err;
      if (!rx.on_header(wire.data() + pos, body, err)) return;
      pos += kFrameHeaderBytes;
      if (w - pos < body) return;
      auto ev = rx.on_body(wire.data() + pos, body);
      pos += body;
      if (ev == FrameReceiver::Event::Error || ev == FrameReceiver::Event::Close) return;
      if (ev == FrameReceiver::Event::Message) rx.take_message();
    }
  }
}

}  // namespace

namespace {

// The dial-back decoders (dial_back_messages.hpp): anything either decodes to a message that
// encodes back to the same bytes, or throws DecodeError.
template <class Decode>
void fuzz_decoder(const Bytes& b, Decode decode) {
  try {
    const auto m = decode(b);
    if (encode(m) != b) __builtin_trap();
  } catch (const gossiptrain::base::DecodeError&) {
  }
}

void fuzz_dial_back(const std::uint8_t* d, std::size_t n) {
  const Bytes b(d, d + n);
  fuzz_decoder(b, decode_dial_back_request);
  fuzz_decoder(b, decode_dial_back_result);
  fuzz_decoder(b, decode_dial_back_hello);
  fuzz_decoder(b, decode_reachability);
  fuzz_decoder(b, decode_relay_ask);
  fuzz_decoder(b, decode_relay_dial);
  if (n >= kRelayPreambleBytes) {
    std::uint64_t nonce = 0;
    std::uint8_t side = 0;
    if (parse_relay_preamble(d, nonce, side) &&
        relay_preamble(nonce, side) != Bytes(d, d + kRelayPreambleBytes))
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::uint8_t mode = data[0];
  const std::uint8_t* d = data + 1;
  std::size_t n = size - 1;
  crypto::Aead aead = (mode & 0x10) && crypto::aes256gcm_available() ? crypto::Aead::Aes256Gcm
                                                                     : crypto::Aead::ChaCha20Poly1305;
  switch (mode % 5) {
    case 0: fuzz_handshake(Handshake::Role::Responder, d, n); break;
    case 1: fuzz_handshake(Handshake::Role::Initiator, d, n); break;
    case 2: fuzz_raw_frames(aead, d, n); break;
    case 3: fuzz_sealed_frames(aead, d, n); break;
    case 4: fuzz_dial_back(d, n); break;
  }
  return 0;
}

namespace {

using Input = std::vector<std::uint8_t>;

void put_record(Input& in, std::uint8_t type, const Input& plain, std::uint8_t flip = 0) {
  in.push_back(type);
  in.push_back(std::uint8_t(plain.size()));
  in.push_back(std::uint8_t(plain.size() >> 8));
  in.push_back(flip);
  in.insert(in.end(), plain.begin(), plain.end());
}

}  // namespace

// Well-formed inputs of every mode, the seeded driver's starting pool (fuzz_driver.cpp).
std::vector<std::vector<std::uint8_t>> gt_fuzz_seeds(std::mt19937_64& rng) {
  std::vector<Input> s;
  for (std::uint8_t mode : {0, 1, 2, 0x12}) {
    Input in{mode};
    for (int i = 0; i < 69 + 113 + 283; ++i) in.push_back(std::uint8_t(rng()));
    if (mode == 0) std::memcpy(in.data() + 1, Handshake::kMagic, 4);
    s.push_back(in);
  }
  for (std::uint8_t mode : {3, 0x13}) {
    Input in{mode};
    put_record(in, 1, Input{5, 1, 2, 3});                            // small message
    Input start{9, 0x10, 0x27, 0, 0, 0, 0, 0, 0};                    // 10000 bytes
    put_record(in, 2, start);
    put_record(in, 3, Input(4096, 0xAB));
    put_record(in, 4, {});                                           // ping
    put_record(in, 3, Input(4096, 0xCD));
    put_record(in, 3, Input(10000 - 8192, 0xEF));
    put_record(in, 6, {});                                           // explicit rekey frame
    put_record(in, 5, Input{'b', 'y', 'e'});                         // close
    s.push_back(in);
  }
  return s;
}
