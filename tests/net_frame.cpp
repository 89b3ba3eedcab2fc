// Frame sealing/opening and message reassembly tests, without sockets, for both AEADs.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "net/buffer_pool.hpp"
#include "net/secure/frame.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

Limits small_limits() {
  Limits l;
  l.max_frame_bytes = 4096;
  l.max_message_bytes = 1 << 20;
  return l;
}

// A sender that records the wire frames of each sealed frame separately.
struct Wire {
  FrameSealer sealer;
  Bytes buf;
  explicit Wire(crypto::Aead a, const crypto::SymKey& k, const Limits& l)
      : sealer(a, k, l), buf(sealer.max_wire_bytes()) {}
  Bytes frame(FrameType t, const Bytes& plain) {
    std::size_t n = sealer.seal(t, plain.data(), plain.size(), buf.data());
    return Bytes(buf.begin(), buf.begin() + n);
  }
  // A whole message as the channel sends it.
  std::vector<Bytes> message(std::uint8_t type, const Bytes& payload, std::size_t chunk) {
    std::vector<Bytes> out;
    Bytes start(kMessageStartBytes);
    start[0] = type;
    for (int i = 0; i < 8; ++i) start[1 + i] = std::uint8_t(std::uint64_t(payload.size()) >> (8 * i));
    out.push_back(frame(FrameType::MessageStart, start));
    for (std::size_t off = 0; off < payload.size(); off += chunk) {
      std::size_t n = std::min(chunk, payload.size() - off);
      out.push_back(
          frame(FrameType::Data, Bytes(payload.begin() + off, payload.begin() + off + n)));
    }
    return out;
  }
};

// Feeds a byte stream of frames; returns the events (messages collected in `msgs`).
struct Feed {
  FrameReceiver rx;
  std::vector<std::pair<std::uint8_t, Bytes>> msgs;
  std::string error, close_reason;
  Feed(crypto::Aead a, const crypto::SymKey& k, const Limits& l,
       std::shared_ptr<BufferPool> buffers = nullptr)
      : rx(a, k, l, std::move(buffers)) {}
  // Returns false once the receiver reports an error (or on a header error).
  bool push(const Bytes& wire) {
    std::size_t off = 0;
    while (off < wire.size()) {
      if (wire.size() - off < kFrameHeaderBytes) return false;
      std::size_t body = 0;
      if (!rx.on_header(wire.data() + off, body, error)) return false;
      off += kFrameHeaderBytes;
      if (wire.size() - off < body) return false;
      auto ev = rx.on_body(wire.data() + off, body);
      off += body;
      if (ev == FrameReceiver::Event::Error) {
        error = rx.text();
        return false;
      }
      if (ev == FrameReceiver::Event::Message)
        msgs.emplace_back(rx.message_type(), rx.take_message());
      if (ev == FrameReceiver::Event::Close) close_reason = rx.text();
    }
    return true;
  }
};

Bytes pattern(std::size_t n, std::uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = std::uint8_t(rng());
  return b;
}

}  // namespace

TEST_CASE("frames: small and streamed messages round trip", "[net]") {
  for (auto a : aeads()) {
    INFO(crypto::aead_name(a));
    auto k = random_key();
    Limits l = small_limits();
    Wire w(a, k, l);
    Feed f(a, k, l);
    Bytes small = pattern(100, 1);
    Bytes msg_plain(1 + small.size());
    msg_plain[0] = 7;
    std::memcpy(msg_plain.data() + 1, small.data(), small.size());
    REQUIRE(f.push(w.frame(FrameType::Message, msg_plain)));
    REQUIRE(f.push(w.frame(FrameType::Ping, {})));
    Bytes big = pattern(50000, 2);
    for (auto& fr : w.message(9, big, l.max_frame_bytes)) REQUIRE(f.push(fr));
    for (auto& fr : w.message(3, {}, l.max_frame_bytes)) REQUIRE(f.push(fr));
    std::string reason = "bye";
    REQUIRE(f.push(w.frame(FrameType::Close, Bytes(reason.begin(), reason.end()))));
    REQUIRE(f.msgs.size() == 3);
    CHECK(f.msgs[0].first == 7);
    CHECK(f.msgs[0].second == small);
    CHECK(f.msgs[1].first == 9);
    CHECK(f.msgs[1].second == big);
    CHECK(f.msgs[2].second.empty());
    CHECK(f.close_reason == "bye");
    // Nothing is accepted after the end of the stream.
    std::size_t body;
    std::string err;
    Bytes ping = w.frame(FrameType::Ping, {});
    CHECK_FALSE(f.rx.on_header(ping.data(), body, err));
  }
}

TEST_CASE("frames: a flipped bit anywhere fails and delivers nothing", "[net]") {
  for (auto a : aeads()) {
    auto k = random_key();
    Limits l = small_limits();
    Bytes big = pattern(3 * 4096 + 17, 3);
    Wire ref(a, k, l);
    auto frames = ref.message(5, big, l.max_frame_bytes);
    Bytes stream;
    for (auto& fr : frames) stream.insert(stream.end(), fr.begin(), fr.end());
    for (std::size_t pos = 0; pos < stream.size(); pos += 97) {
      Bytes s = stream;
      s[pos] ^= std::uint8_t(1u << (pos % 8));
      Feed f(a, k, l);
      INFO(crypto::aead_name(a) << " byte " << pos);
      CHECK_FALSE(f.push(s));
      CHECK(f.msgs.empty());
    }
  }
}

TEST_CASE("frames: replayed, reordered and dropped frames fail", "[net]") {
  auto a = crypto::Aead::ChaCha20Poly1305;
  auto k = random_key();
  Limits l = small_limits();
  Wire w(a, k, l);
  Bytes p1{1, 2, 3}, p2{1, 4, 5}, p3{1, 6};
  Bytes f1 = w.frame(FrameType::Message, p1), f2 = w.frame(FrameType::Message, p2),
        f3 = w.frame(FrameType::Message, p3);
  {
    Feed f(a, k, l);
    CHECK(f.push(f1));
    CHECK_FALSE(f.push(f1));  // replay
    CHECK(f.msgs.size() == 1);
  }
  {
    Feed f(a, k, l);
    CHECK_FALSE(f.push(f2));  // reorder / drop of the first
  }
  {
    Feed f(a, k, l);
    CHECK(f.push(f1));
    CHECK_FALSE(f.push(f3));  // f2 dropped
    CHECK(f.msgs.size() == 1);
  }
  {
    Feed f(a, random_key(), l);  // wrong key
    CHECK_FALSE(f.push(f1));
  }
}

TEST_CASE("frames: bad headers are refused before any allocation", "[net]") {
  Limits l = small_limits();
  FrameHeader h;
  std::string err;
  std::uint8_t hdr[kFrameHeaderBytes];
  encode_frame_header(hdr, FrameType::Data, 0xffffffffu);
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  CHECK(err.find("bad length") != std::string::npos);
  encode_frame_header(hdr, FrameType::Data, std::uint32_t(l.max_frame_bytes + 17));
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  encode_frame_header(hdr, FrameType::Data, std::uint32_t(l.max_frame_bytes + 16));
  CHECK(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  encode_frame_header(hdr, FrameType::Data, 15);
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  encode_frame_header(hdr, FrameType::Ping, 17);
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  encode_frame_header(hdr, FrameType::MessageStart, 16 + 8);
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  hdr[4] = 0;
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
  hdr[4] = 99;
  CHECK_FALSE(decode_frame_header(hdr, l.max_frame_bytes, h, err));
}

TEST_CASE("frames: message sequencing and size limits", "[net]") {
  auto a = crypto::Aead::ChaCha20Poly1305;
  auto k = random_key();
  Limits l = small_limits();
  SECTION("data without a start") {
    Wire w(a, k, l);
    Feed f(a, k, l);
    CHECK_FALSE(f.push(w.frame(FrameType::Data, Bytes(10, 1))));
    CHECK(f.error.find("unexpected data") != std::string::npos);
  }
  SECTION("announced length above the limit") {
    Wire w(a, k, l);
    Feed f(a, k, l);
    Bytes start(kMessageStartBytes, 0);
    std::uint64_t total = l.max_message_bytes + 1;
    for (int i = 0; i < 8; ++i) start[1 + i] = std::uint8_t(total >> (8 * i));
    CHECK_FALSE(f.push(w.frame(FrameType::MessageStart, start)));
    CHECK(f.error.find("exceeds the limit") != std::string::npos);
  }
  SECTION("data beyond the announced length") {
    Wire w(a, k, l);
    Feed f(a, k, l);
    auto frames = w.message(1, Bytes(100, 3), l.max_frame_bytes);
    frames.pop_back();
    for (auto& fr : frames) CHECK(f.push(fr));
    CHECK_FALSE(f.push(w.frame(FrameType::Data, Bytes(101, 3))));
    CHECK(f.error.find("overruns") != std::string::npos);
  }
  SECTION("a new message inside a message") {
    Wire w(a, k, l);
    Feed f(a, k, l);
    auto frames = w.message(1, Bytes(10000, 3), l.max_frame_bytes);
    CHECK(f.push(frames[0]));
    CHECK(f.push(frames[1]));
    CHECK_FALSE(f.push(w.frame(FrameType::Message, Bytes{1, 2})));
    CHECK(f.msgs.empty());
  }
}

TEST_CASE("frames: the sender rekeys on schedule and the receiver follows", "[net]") {
  for (auto a : aeads()) {
    auto k = random_key();
    Limits l = small_limits();
    l.rekey_after_frames = 3;
    l.rekey_after_bytes = 5000;
    Wire w(a, k, l);
    Feed f(a, k, l);
    Bytes big = pattern(40000, 4);
    Bytes stream;
    for (int rep = 0; rep < 3; ++rep)
      for (auto& fr : w.message(2, big, 3000)) stream.insert(stream.end(), fr.begin(), fr.end());
    // More frames than data+start frames: the rekey frames are in the stream.
    CHECK(w.sealer.frames_sealed() > 3 * (1 + 14));
    REQUIRE(f.push(stream));
    REQUIRE(f.msgs.size() == 3);
    for (auto& m : f.msgs) CHECK(m.second == big);
    // The receiver follows the Rekey frames it sees, whatever its own schedule.
    Feed plain(a, k, small_limits());
    Wire w2(a, k, l);
    Bytes s2;
    for (int j = 0; j < 5; ++j) {
      Bytes fr = w2.frame(FrameType::Ping, {});
      s2.insert(s2.end(), fr.begin(), fr.end());
    }
    CHECK(plain.push(s2));
  }
}

TEST_CASE("buffer pool: large messages are received into recycled buffers", "[net]") {
  auto pool = std::make_shared<BufferPool>();
  SECTION("take and recycle") {
    Bytes a = pool->take(200000);
    CHECK(a.empty());
    CHECK(a.capacity() >= 200000);
    const auto* mem = a.data();
    CHECK(pool->stats().fresh == 1);
    pool->recycle(std::move(a));
    CHECK(a.capacity() == 0);  // given away
    CHECK(pool->stats().held_bytes >= 200000);
    Bytes b = pool->take(190000);  // within 5/4: the same memory comes back, emptied
    CHECK(b.data() == mem);
    CHECK(b.empty());
    CHECK(pool->stats().reused == 1);
    CHECK(pool->stats().held_bytes == 0);
    Bytes c = pool->take(100000);  // 200000 is more than 5/4 of it: a fresh one
    CHECK(c.data() != mem);
    CHECK(pool->stats().fresh == 2);
  }
  SECTION("small buffers are not pooled, and the limit holds") {
    Bytes s = pool->take(100);
    s.resize(100);
    pool->recycle(std::move(s));
    CHECK(pool->stats().held_bytes == 0);
    CHECK(pool->stats().fresh == 0);  // small ones are not counted either
    pool->set_limit(300000);
    Bytes x = pool->take(200000), y = pool->take(200000);
    pool->recycle(std::move(x));
    pool->recycle(std::move(y));  // over the limit: freed
    CHECK(pool->stats().held_bytes >= 200000);
    CHECK(pool->stats().held_bytes <= 300000);
    pool->set_limit(0);  // frees everything held
    CHECK(pool->stats().held_bytes == 0);
    CHECK(pool->stats().limit_bytes == 0);
  }
  SECTION("two pools share nothing") {
    BufferPool other;
    Bytes a = pool->take(200000);
    pool->recycle(std::move(a));
    Bytes b = other.take(200000);
    CHECK(other.stats().reused == 0);
    CHECK(pool->stats().held_bytes >= 200000);
  }
  SECTION("the frame receiver reuses a recycled message buffer of its pool") {
    for (auto a : aeads()) {
      INFO(crypto::aead_name(a));
      auto k = random_key();
      Limits l = small_limits();
      Wire w(a, k, l);
      Feed f(a, k, l, pool);
      Bytes big = pattern(300000, 5);
      for (auto& fr : w.message(9, big, l.max_frame_bytes)) REQUIRE(f.push(fr));
      REQUIRE(f.msgs.size() == 1);
      CHECK(f.msgs[0].second == big);
      const auto* mem = f.msgs[0].second.data();
      pool->recycle(std::move(f.msgs[0].second));
      Bytes big2 = pattern(290000, 6);
      for (auto& fr : w.message(4, big2, l.max_frame_bytes)) REQUIRE(f.push(fr));
      REQUIRE(f.msgs.size() == 2);
      CHECK(f.msgs[1].second.data() == mem);  // pages already mapped
      CHECK(f.msgs[1].second == big2);        // and nothing of the old message shows
      pool->recycle(std::move(f.msgs[1].second));
    }
  }
}
