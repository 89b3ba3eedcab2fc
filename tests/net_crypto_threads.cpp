// Crypto threads (net/secure/crypto_pool.hpp): the frames of a large message sealed and opened on several
// threads give the same wire as one thread, arrive whole and in order, and fail as a whole when
// any frame is tampered with, dropped, replayed or reordered.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <random>

#include "base/bytes.hpp"
#include "tests/net_test_util.hpp"

using namespace gossiptrain::net;
using namespace gossiptrain::net::test;

namespace {

Bytes pattern(std::size_t n, std::uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (auto& x : b) x = std::uint8_t(rng());
  return b;
}

// Frames of 64 KiB (the smallest the pool takes), rekeys every 20 frames: a 3 MiB message
// crosses several rekeys, some inside a sealing batch.
Limits frame_limits() {
  Limits l;
  l.max_frame_bytes = kParallelMinFrameBytes;
  l.max_message_bytes = 8u << 20;
  l.rekey_after_frames = 20;
  return l;
}

Bytes start_frame_plain(std::uint8_t type, std::size_t total) {
  Bytes s(kMessageStartBytes);
  s[0] = type;
  for (int i = 0; i < 8; ++i) s[1 + i] = std::uint8_t(std::uint64_t(total) >> (8 * i));
  return s;
}

// One wire frame per element, split from a stream of frames.
std::vector<Bytes> split_frames(const Bytes& stream) {
  std::vector<Bytes> out;
  for (std::size_t off = 0; off < stream.size();) {
    const std::size_t body = gossiptrain::base::get_u32(stream.data() + off);
    std::size_t n = kFrameHeaderBytes + body;
    out.emplace_back(stream.begin() + off, stream.begin() + off + n);
    off += n;
  }
  return out;
}

// A streamed message (and a ping after it) as one thread seals it: seal() frame by frame.
Bytes seal_serial(crypto::Aead a, const crypto::SymKey& k, const Limits& l, const Bytes& msg) {
  FrameSealer s(a, k, l);
  Bytes out, buf(s.max_wire_bytes());
  auto put = [&](FrameType t, const std::uint8_t* p, std::size_t n) {
    std::size_t w = s.seal(t, p, n, buf.data());
    out.insert(out.end(), buf.begin(), buf.begin() + w);
  };
  Bytes start = start_frame_plain(9, msg.size());
  put(FrameType::MessageStart, start.data(), start.size());
  for (std::size_t off = 0; off < msg.size(); off += l.max_frame_bytes)
    put(FrameType::Data, msg.data() + off, std::min(l.max_frame_bytes, msg.size() - off));
  put(FrameType::Ping, nullptr, 0);
  return out;
}

// The same with the data frames sealed in batches by the pool's workers, as the channel does.
Bytes seal_parallel(crypto::Aead a, const crypto::SymKey& k, const Limits& l, const Bytes& msg,
                    std::shared_ptr<CryptoPool> pool, std::size_t batch_frames) {
  FrameSealer s(a, k, l);
  Bytes out, buf(s.max_wire_bytes());
  Bytes start = start_frame_plain(9, msg.size());
  std::size_t w = s.seal(FrameType::MessageStart, start.data(), start.size(), buf.data());
  out.insert(out.end(), buf.begin(), buf.begin() + w);
  CryptoBatch batch(pool);
  Bytes wire(s.batch_wire_bytes(batch_frames));
  for (std::size_t off = 0; off < msg.size();) {
    std::size_t used = 0;
    std::size_t n = s.seal_data_batch(msg.data() + off, msg.size() - off, l.max_frame_bytes,
                                      batch_frames, wire.data(), batch, used);
    REQUIRE(used > 0);
    REQUIRE(batch.wait_all());
    out.insert(out.end(), wire.begin(), wire.begin() + n);
    off += used;
  }
  w = s.seal(FrameType::Ping, nullptr, 0, buf.data());
  out.insert(out.end(), buf.begin(), buf.begin() + w);
  return out;
}

struct Fed {
  std::vector<Bytes> msgs;
  std::string error;
  bool ok = true;
};

// Feeds whole frames to a receiver (with a pool when given one) until the first error.
Fed feed(crypto::Aead a, const crypto::SymKey& k, const Limits& l, const std::vector<Bytes>& frames,
         std::shared_ptr<CryptoPool> pool) {
  FrameReceiver rx(a, k, l);
  if (pool) rx.set_crypto_pool(pool, 0);
  Fed r;
  for (const Bytes& f : frames) {
    std::size_t body = 0;
    if (!rx.on_header(f.data(), body, r.error)) {
      r.ok = false;
      return r;
    }
    REQUIRE(body == f.size() - kFrameHeaderBytes);
    // As the channel does: the body is read straight into the receiver's buffer.
    std::memcpy(rx.body_buffer(), f.data() + kFrameHeaderBytes, body);
    auto ev = rx.on_body(rx.body_buffer(), body);
    if (ev == FrameReceiver::Event::Error) {
      r.error = rx.text();
      r.ok = false;
      return r;
    }
    if (ev == FrameReceiver::Event::Message) r.msgs.push_back(rx.take_message());
  }
  return r;
}

// The frames of the serial stream: [0] start, [1..n] data and rekey frames, last the ping.
struct Case {
  crypto::Aead aead;
  crypto::SymKey key = random_key();
  Limits limits = frame_limits();
  Bytes msg = pattern((3u << 20) + 123, 11);
  std::vector<Bytes> frames;
  explicit Case(crypto::Aead a) : aead(a) {
    frames = split_frames(seal_serial(aead, key, limits, msg));
  }
  // Index of the data frame in the middle of the message.
  std::size_t middle_data() const {
    std::size_t i = frames.size() / 2;
    while (frames[i][4] != std::uint8_t(FrameType::Data)) ++i;
    return i;
  }
  // Index of the first data frame after frame i.
  std::size_t data_after(std::size_t i) const {
    do ++i;
    while (frames[i][4] != std::uint8_t(FrameType::Data));
    return i;
  }
};

}  // namespace

TEST_CASE("crypto pool: tasks run on the workers and a failure is reported by index", "[net]") {
  auto pool = std::make_shared<CryptoPool>(3);
  CHECK(pool->threads() == 3);
  std::atomic<int> ran{0};
  CryptoBatch b(pool);
  for (int i = 0; i < 100; ++i)
    b.add([&ran, i] {
      ++ran;
      return i != 37 && i != 60;
    });
  CHECK(b.wait(5));
  CHECK_FALSE(b.wait(37));
  std::size_t bad = 0;
  CHECK_FALSE(b.wait_all(&bad));
  CHECK(bad == 37);
  CHECK(ran == 100);
  CHECK(b.size() == 0);
  b.add([] { return true; });
  CHECK(b.wait_all());
  CHECK_THROWS_AS(CryptoPool(0), std::logic_error);
}

TEST_CASE("crypto threads: the wire is identical with 1 and N threads, rekeys included", "[net]") {
  for (auto a : aeads()) {
    INFO(crypto::aead_name(a));
    Case c(a);
    Bytes serial = seal_serial(a, c.key, c.limits, c.msg);
    std::size_t rekeys = 0;
    for (auto& f : c.frames) rekeys += f[4] == std::uint8_t(FrameType::Rekey);
    CHECK(rekeys >= 2);
    for (unsigned threads : {1u, 2u, 4u}) {
      auto pool = std::make_shared<CryptoPool>(threads);
      for (std::size_t batch_frames : {1u, 7u, 16u, 64u}) {
        INFO(threads << " threads, " << batch_frames << " frames a batch");
        CHECK(seal_parallel(a, c.key, c.limits, c.msg, pool, batch_frames) == serial);
      }
    }
  }
}

TEST_CASE("crypto threads: a message over many frames round trips with 1 and N threads", "[net]") {
  for (auto a : aeads()) {
    INFO(crypto::aead_name(a));
    Case c(a);
    // With no pool, and with pools of several sizes (frames in flight: 2 per worker).
    std::vector<std::shared_ptr<CryptoPool>> pools{nullptr, std::make_shared<CryptoPool>(2),
                                                   std::make_shared<CryptoPool>(5)};
    for (auto& pool : pools) {
      INFO((pool ? pool->threads() : 1u) << " threads");
      auto r = feed(a, c.key, c.limits, c.frames, pool);
      REQUIRE(r.ok);
      REQUIRE(r.msgs.size() == 1);
      CHECK(r.msgs[0] == c.msg);
      // Every data frame of 64 KiB went to the workers; the last one, 123 bytes, did not.
      if (pool) CHECK(pool->tasks_run() == c.msg.size() / kParallelMinFrameBytes);
    }
    // Sealed in parallel, opened in parallel: two messages back to back.
    auto pool = std::make_shared<CryptoPool>(3);
    Bytes s = seal_parallel(a, c.key, c.limits, c.msg, pool, 5);
    CHECK(pool->tasks_run() >= c.msg.size() / kParallelMinTaskBytes);
    auto frames = split_frames(s);
    auto r = feed(a, c.key, c.limits, frames, pool);
    REQUIRE(r.ok);
    REQUIRE(r.msgs.size() == 1);
    CHECK(r.msgs[0] == c.msg);
  }
}

TEST_CASE("crypto threads: a tampered frame in the middle fails the whole message", "[net]") {
  auto pool = std::make_shared<CryptoPool>(4);
  for (auto a : aeads()) {
    INFO(crypto::aead_name(a));
    Case c(a);
    std::size_t mid = c.middle_data();
    for (std::size_t pos : {kFrameHeaderBytes + 1, c.frames[mid].size() / 2,
                            c.frames[mid].size() - 1}) {  // ciphertext start, middle, tag
      INFO("byte " << pos);
      auto frames = c.frames;
      frames[mid][pos] ^= 0x20;
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.empty());
      CHECK_THAT(r.error, Catch::Contains("frame authentication failed (data frame"));
    }
    // The last data frame, and the first.
    for (std::size_t i : {std::size_t(1), c.frames.size() - 2}) {
      auto frames = c.frames;
      frames[i][frames[i].size() - 3] ^= 1;
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.empty());
    }
  }
}

TEST_CASE("crypto threads: dropped, replayed and reordered frames are rejected", "[net]") {
  auto pool = std::make_shared<CryptoPool>(4);
  for (auto a : aeads()) {
    INFO(crypto::aead_name(a));
    Case c(a);
    const std::size_t mid = c.middle_data(), next = c.data_after(mid);
    SECTION("dropped") {
      auto frames = c.frames;
      frames.erase(frames.begin() + long(mid));
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.empty());
    }
    SECTION("replayed") {
      auto frames = c.frames;
      frames.insert(frames.begin() + long(mid) + 1, c.frames[mid]);
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.empty());
    }
    SECTION("reordered") {
      auto frames = c.frames;
      std::swap(frames[mid], frames[next]);
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.empty());
      CHECK_THAT(r.error, Catch::Contains("frame authentication failed"));
    }
    SECTION("a whole message replayed after it was delivered") {
      auto frames = c.frames;
      frames.pop_back();  // the ping
      auto again = frames;
      frames.insert(frames.end(), again.begin(), again.end());
      auto r = feed(a, c.key, c.limits, frames, pool);
      CHECK_FALSE(r.ok);
      CHECK(r.msgs.size() == 1);  // the first delivery only
    }
  }
}

TEST_CASE("tcp: large messages both ways with crypto threads, rekeys inside them", "[net]") {
  Limits l = short_limits();
  l.idle_timeout = 10000ms;  // sanitizer builds are slow
  l.keepalive_interval = 1000ms;
  l.max_frame_bytes = 256 * 1024;
  l.rekey_after_frames = 7;
  for (auto pref : {AeadPreference::ChaCha20Poly1305, AeadPreference::Auto}) {
    auto sc = make_config(7, l), cc = make_config(7, l);
    sc.aead = pref;
    sc.crypto_threads = 3;
    cc.crypto_threads = 4;
    sc.crypto_min_message_bytes = cc.crypto_min_message_bytes = 1u << 20;
    Recorder server_events, client_events;
    TcpTransport server(std::move(sc)), client(std::move(cc));
    CHECK(server.crypto_threads() == 3);
    server.set_handler(&server_events);
    client.set_handler(&client_events);
    server_events.echo = true;
    server.start();
    client.start();
    auto r = dial(client, server.listen_addr());
    REQUIRE(r.conn);
    // Large (pool), just under the threshold (io thread), small, and large again: in order.
    std::vector<SharedBytes> sent{std::make_shared<const Bytes>(pattern((20u << 20) + 5, 1)),
                                  std::make_shared<const Bytes>(pattern((1u << 20) - 1, 2)),
                                  std::make_shared<const Bytes>(pattern(100, 3)),
                                  std::make_shared<const Bytes>(pattern(9u << 20, 4))};
    for (std::size_t i = 0; i < sent.size(); ++i)
      CHECK(on_io(client, [&] { return r.conn->send(std::uint8_t(i + 1), sent[i]); }));
    REQUIRE(wait_for([&] { return client_events.n_msgs() == sent.size(); }, 60000ms));
    // The two large messages went through both sides' workers. Sealing: one task per 256 KiB
    // frame and one for the 5 bytes left; opening: the full frames (5 bytes are opened inline).
    std::uint64_t opened = ((20u << 20) + 5) / l.max_frame_bytes + (9u << 20) / l.max_frame_bytes;
    CHECK(server.crypto_tasks_run() == 2 * opened + 1);  // opened, then sealed for the echo
    CHECK(client.crypto_tasks_run() == 2 * opened + 1);  // sealed, then opened
    std::lock_guard lk(client_events.mu);
    for (std::size_t i = 0; i < sent.size(); ++i) {
      CHECK(client_events.msgs[i].first == i + 1);
      CHECK(client_events.msgs[i].second == *sent[i]);
    }
    CHECK(client_events.closed.empty());
  }
}

TEST_CASE("tcp: crypto_threads above the cap is a ConfigError", "[net]") {
  auto c = make_config();
  c.crypto_threads = kMaxCryptoThreads + 1;
  CHECK_THROWS_AS(TcpTransport(c), ConfigError);
  c.crypto_threads = 0;
  CHECK_NOTHROW(TcpTransport(c));
  CHECK(default_crypto_threads() >= 1);
  CHECK(default_crypto_threads() <= kMaxDefaultCryptoThreads);
}
