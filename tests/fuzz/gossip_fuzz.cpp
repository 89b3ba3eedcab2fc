// Fuzz target for the gossip/ message decoders: membership (ping, ack, ping-req, sync, gossip),
// the averaging exchange (request, accept, id, valid, code, chunk) and catch-up (request, header,
// end, code). The first input byte picks the decoder, the rest is the message. A decoder may
// return or throw base::DecodeError, nothing else; what it accepts must survive a round trip
// (encode, decode, encode gives the same bytes). libFuzzer entry point; fuzz_driver.cpp runs it
// from a seeded mutation loop (ctest "gossip_fuzz_smoke").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gossip/catch_up/catch_up_messages.hpp"
#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/membership/messages.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using net::Bytes;

namespace {

constexpr int kDecoders = 15;

[[noreturn]] void broken(const char* what, int mode) {
  std::fprintf(stderr, "gossip_fuzz: decoder %d: %s\n", mode, what);
  std::abort();
}

// Encodes what a decoder accepted, decodes that again and encodes once more: the two encodings
// must be equal (a decoder that accepts what its encoder would not write is caught here too when
// the value changes).
template <class Decode, class Encode>
void round_trip(int mode, const Bytes& in, Decode decode, Encode encode) {
  Bytes first;
  try {
    first = encode(decode(in));
  } catch (const base::DecodeError&) {
    return;  // rejected: the expected answer to most inputs
  }
  try {
    if (encode(decode(first)) != first) broken("re-encoding differs", mode);
  } catch (const base::DecodeError&) {
    broken("its own encoding of an accepted message does not decode", mode);
  }
}

Bytes deref(const net::SharedBytes& b) { return *b; }

void run(int mode, const Bytes& in) {
  switch (mode) {
    case 0: return round_trip(mode, in, decode_ping, [](const PingMsg& m) { return encode(m); });
    case 1: return round_trip(mode, in, decode_ack, [](const AckMsg& m) { return encode(m); });
    case 2:
      return round_trip(mode, in, decode_ping_req, [](const PingReqMsg& m) { return encode(m); });
    case 3: return round_trip(mode, in, decode_sync, [](const SyncMsg& m) { return encode(m); });
    case 4:
      return round_trip(mode, in, decode_gossip, [](const GossipMsg& m) { return encode(m); });
    case 5:
      return round_trip(mode, in, decode_request,
                        [](const RequestMsg& m) { return deref(encode_request(m)); });
    case 6:
      return round_trip(mode, in, decode_accept,
                        [](const AcceptMsg& m) { return deref(encode_accept(m)); });
    case 7:
      return round_trip(mode, in, decode_id,
                        [](const IdMsg& m) { return deref(encode_id(m.exchange_id)); });
    case 8:
      return round_trip(mode, in, decode_valid,
                        [](const ValidMsg& m) { return deref(encode_valid(m)); });
    case 9:
      return round_trip(mode, in, decode_code,
                        [](const CodeMsg& m) { return deref(encode_code(m.exchange_id, m.code)); });
    case 10:
      return round_trip(mode, in, [](const Bytes& b) { return std::pair{decode_chunk(b), &b}; },
                        [](const std::pair<ChunkView, const Bytes*>& p) {
                          const auto& [v, b] = p;
                          if (v.size == 0 || kChunkHeaderBytes + v.size != b->size())
                            broken("chunk view outside its message", 10);
                          return deref(encode_chunk(v.exchange_id, v.offset,
                                                    b->data() + kChunkHeaderBytes, v.size));
                        });
    case 11:
      return round_trip(mode, in, decode_catch_up_request, [](const CatchUpRequestMsg& m) {
        return deref(encode_catch_up_request(m));
      });
    case 12:
      return round_trip(mode, in, decode_catch_up_header, [](const CatchUpHeaderMsg& m) {
        return deref(encode_catch_up_header(m));
      });
    case 13:
      return round_trip(mode, in, decode_catch_up_end,
                        [](const CatchUpEndMsg& m) { return deref(encode_catch_up_end(m)); });
    default:
      return round_trip(mode, in, decode_catch_up_code, [](const CatchUpCodeMsg& m) {
        return deref(encode_catch_up_code(m.id, m.code));
      });
  }
}

Update update(std::mt19937_64& rng, int i) {
  Update u;
  u.id = "peer-" + std::to_string(i);
  u.addr = "10.0.0." + std::to_string(1 + i) + ":7000";
  u.incarnation = rng() % 9;
  u.state = static_cast<MemberState>(rng() % 4);
  u.from = i % 2 ? u.id : "peer-0";
  return u;
}

std::vector<Update> updates(std::mt19937_64& rng, int n) {
  std::vector<Update> v;
  for (int i = 0; i < n; ++i) v.push_back(update(rng, i));
  return v;
}

// Sized once, then filled. GCC 12 -O2 warned (-Wstringop-overread, a false positive of the
// vector::insert kind, GCC PR 100366 and 106199) on the one-byte vector grown by insert(end, ...):
// the reallocation moves the tail [end, end), which is empty, with a memmove guarded by
// "length != 0", and GCC does not prove the length 0, so it sees a read past the one byte.
Bytes with_mode(int mode, const Bytes& msg) {
  Bytes in(1 + msg.size());
  in[0] = std::uint8_t(mode);
  std::copy(msg.begin(), msg.end(), in.begin() + 1);
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  run(data[0] % kDecoders, Bytes(data + 1, data + size));
  return 0;
}

// Well-formed messages of every kind, the driver's starting pool.
std::vector<std::vector<std::uint8_t>> gt_fuzz_seeds(std::mt19937_64& rng) {
  std::vector<Bytes> s;
  s.push_back(with_mode(0, encode(PingMsg{7, "peer-3", updates(rng, 3), {0.5, 40}})));
  s.push_back(with_mode(1, encode(AckMsg{7, updates(rng, 2), {1.0, 80}})));
  s.push_back(with_mode(2, encode(PingReqMsg{8, "peer-2", "10.0.0.3:7000", updates(rng, 1)})));
  s.push_back(with_mode(3, encode(SyncMsg{9, true, updates(rng, 6)})));
  s.push_back(with_mode(4, encode(GossipMsg{updates(rng, 4)})));
  RequestMsg req;
  req.exchange_id = 11, req.fingerprint = 0xfeed, req.n_params = 1000, req.weighted = true;
  req.samples = 600, req.progress = 0.5, req.step = 40;
  s.push_back(with_mode(5, *encode_request(req)));
  s.push_back(with_mode(6, *encode_accept(AcceptMsg{11, 500, 0.25, 20})));
  s.push_back(with_mode(7, *encode_id(11)));
  s.push_back(with_mode(8, *encode_valid(ValidMsg{11, 2.0, 1.5})));
  s.push_back(with_mode(8, *encode_valid(ValidMsg{11, 0.0, 0.0})));
  s.push_back(with_mode(9, *encode_code(11, ExchangeCode::Timeout)));
  const Bytes data(64, 0x3c);
  s.push_back(with_mode(10, *encode_chunk(11, 128, data.data(), data.size())));
  s.push_back(with_mode(11, *encode_catch_up_request(CatchUpRequestMsg{3, 0xfeed, 1000})));
  s.push_back(with_mode(12, *encode_catch_up_header(CatchUpHeaderMsg{3, 4096, 0xfeed, 9, 1, 80})));
  s.push_back(with_mode(13, *encode_catch_up_end(CatchUpEndMsg{3, 0xdeadbeef})));
  s.push_back(with_mode(14, *encode_catch_up_code(3, CatchUpCode::NotReady)));
  return s;
}
