// Handshake state machine tests, without sockets.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <random>

#include "net/secure/handshake.hpp"

using namespace gossiptrain::net;
using Role = Handshake::Role;

namespace {

// One transport: its identity and its instance (a clone shares the identity, not the instance).
struct Peer {
  Identity id = Identity::generate();
  std::uint64_t instance = std::random_device{}() | 1;
  HandshakeParams params(std::uint64_t fp = 42) const {
    HandshakeParams p;
    p.identity = &id;
    p.fingerprint = fp;
    p.instance = instance;
    p.listen_addr = "127.0.0.1:" + std::to_string(1000 + (id.public_key()[0]));
    return p;
  }
};

// Optional tamper hook: (message index 1..4, bytes) may change the bytes in flight.
using Tamper = std::function<void(int, Bytes&)>;

// Drives both machines to the end; returns the number of messages exchanged.
int drive(Handshake& i, Handshake& r, const Tamper& tamper = {}) {
  Bytes msg = i.start();
  int n = 0;
  bool to_r = true;
  while (!msg.empty()) {
    ++n;
    if (tamper) tamper(n, msg);
    Handshake& dst = to_r ? r : i;
    if (dst.expected_bytes() == 0) break;
    msg = dst.on_message(msg);
    to_r = !to_r;
  }
  return n;
}

}  // namespace

TEST_CASE("handshake: both sides derive crossed session keys and learn each other", "[net]") {
  Peer a, b;
  Handshake i(Role::Initiator, a.params()), r(Role::Responder, b.params());
  CHECK(r.expected_bytes() == Handshake::kM1Bytes);
  CHECK(drive(i, r) == 4);
  REQUIRE(i.done());
  REQUIRE(r.done());
  auto ri = i.take_result();
  auto rr = r.take_result();
  CHECK(std::memcmp(ri.send_key.data(), rr.recv_key.data(), 32) == 0);
  CHECK(std::memcmp(ri.recv_key.data(), rr.send_key.data(), 32) == 0);
  CHECK(std::memcmp(ri.send_key.data(), ri.recv_key.data(), 32) != 0);
  CHECK(ri.remote_key == b.id.public_key());
  CHECK(rr.remote_key == a.id.public_key());
  CHECK(ri.remote_peer_id == b.id.peer_id());
  CHECK(rr.remote_listen_addr == a.params().listen_addr);
  CHECK(ri.remote_fingerprint == 42);
  CHECK(ri.aead == rr.aead);
  CHECK(ri.aead ==
        (crypto::aes256gcm_available() ? crypto::Aead::Aes256Gcm : crypto::Aead::ChaCha20Poly1305));
}

TEST_CASE("handshake: fresh ephemeral keys give fresh session keys", "[net]") {
  Peer a, b;
  Handshake i1(Role::Initiator, a.params()), r1(Role::Responder, b.params());
  Handshake i2(Role::Initiator, a.params()), r2(Role::Responder, b.params());
  drive(i1, r1);
  drive(i2, r2);
  REQUIRE(i1.done());
  REQUIRE(i2.done());
  CHECK(std::memcmp(i1.take_result().send_key.data(), i2.take_result().send_key.data(), 32) != 0);
}

TEST_CASE("handshake: AEAD negotiation follows the forced choice", "[net]") {
  Peer a, b;
  auto pa = a.params(), pb = b.params();
  pa.aead = AeadPreference::ChaCha20Poly1305;
  Handshake i(Role::Initiator, pa), r(Role::Responder, pb);
  drive(i, r);
  REQUIRE(i.done());
  CHECK(i.take_result().aead == crypto::Aead::ChaCha20Poly1305);
  if (crypto::aes256gcm_available()) {
    pa.aead = AeadPreference::Aes256Gcm;
    pb.aead = AeadPreference::ChaCha20Poly1305;
    Handshake i2(Role::Initiator, pa), r2(Role::Responder, pb);
    drive(i2, r2);
    CHECK(r2.failed());
    CHECK(r2.error().find("no common AEAD") != std::string::npos);
    pb.aead = AeadPreference::Aes256Gcm;
    Handshake i3(Role::Initiator, pa), r3(Role::Responder, pb);
    drive(i3, r3);
    REQUIRE(i3.done());
    CHECK(i3.take_result().aead == crypto::Aead::Aes256Gcm);
  }
}

TEST_CASE("handshake: a peer without the network key cannot complete", "[net]") {
  Peer a, b;
  crypto::SymKey k1, k2;
  crypto::random_bytes(k1.span());
  crypto::random_bytes(k2.span());
  // Drives a handshake between a (initiator) and b (responder) holding these network keys.
  struct Outcome {
    bool initiator_done, responder_done, responder_failed;
    std::string responder_error;
  };
  auto run = [&](std::optional<crypto::SymKey> initiator_key,
                 std::optional<crypto::SymKey> responder_key) {
    auto pa = a.params(), pb = b.params();
    pa.network_key = initiator_key;
    pb.network_key = responder_key;
    Handshake i(Role::Initiator, pa), r(Role::Responder, pb);
    drive(i, r);
    return Outcome{i.done(), r.done(), r.failed(), r.failed() ? r.error() : std::string()};
  };
  SECTION("responder has a key, initiator none") {
    const Outcome o = run(std::nullopt, k1);
    CHECK(o.responder_failed);
    CHECK(o.responder_error.find("network key") != std::string::npos);
    CHECK_FALSE(o.initiator_done);
  }
  SECTION("different keys") {
    const Outcome o = run(k1, k2);
    CHECK(o.responder_failed);
    CHECK_FALSE(o.initiator_done);
  }
  SECTION("same key") {
    const Outcome o = run(k1, k1);
    CHECK(o.initiator_done);
    CHECK(o.responder_done);
  }
}

TEST_CASE("handshake: allowlist is checked on the remote identity", "[net]") {
  Peer a, b, c;
  Allowlist only_c;
  only_c.add(c.id.public_key());
  SECTION("responder refuses an unlisted initiator") {
    auto pb = b.params();
    pb.allowlist = &only_c;
    Handshake i(Role::Initiator, a.params()), r(Role::Responder, pb);
    drive(i, r);
    CHECK(r.failed());
    CHECK(r.error().find("allowlist") != std::string::npos);
    CHECK(r.error().find(a.id.peer_id()) != std::string::npos);
    CHECK_FALSE(i.done());
  }
  SECTION("initiator refuses an unlisted responder") {
    auto pa = a.params();
    pa.allowlist = &only_c;
    Handshake i(Role::Initiator, pa), r(Role::Responder, b.params());
    drive(i, r);
    CHECK(i.failed());
    CHECK(i.error().find("allowlist") != std::string::npos);
    CHECK_FALSE(r.done());
  }
  SECTION("listed keys pass") {
    Allowlist both;
    both.add(a.id.public_key());
    both.add(b.id.public_key());
    auto pa = a.params(), pb = b.params();
    pa.allowlist = &both;
    pb.allowlist = &both;
    Handshake i(Role::Initiator, pa), r(Role::Responder, pb);
    drive(i, r);
    CHECK(i.done());
    CHECK(r.done());
  }
}

TEST_CASE("handshake: fingerprint and version mismatch fail on both sides with a reason", "[net]") {
  Peer a, b;
  Handshake i(Role::Initiator, a.params(1)), r(Role::Responder, b.params(2));
  CHECK(drive(i, r) == 4);  // R still sends M4 so that I learns the reason too
  CHECK(r.failed());
  CHECK(i.failed());
  CHECK(r.error().find("fingerprint mismatch") != std::string::npos);
  CHECK(i.error().find("fingerprint mismatch") != std::string::npos);
  auto pa = a.params(), pb = b.params();
  pa.version = 7;
  Handshake i2(Role::Initiator, pa), r2(Role::Responder, pb);
  drive(i2, r2);
  CHECK(r2.error().find("version mismatch") != std::string::npos);
}

TEST_CASE(
    "handshake: a peer of protocol 3 (before the transport's NAT messages 0xF0-0xF5) is "
    "refused on both sides with the versions in the reason",
    "[net][nat]") {
  REQUIRE(kProtocolVersion == 4);
  Peer a, b;
  for (const bool old_initiates : {true, false}) {
    auto pa = a.params(), pb = b.params();
    (old_initiates ? pa : pb).version = 3;
    Handshake i(Role::Initiator, pa), r(Role::Responder, pb);
    drive(i, r);
    CHECK(i.failed());
    CHECK(r.failed());
    const std::string mine = old_initiates ? r.error() : i.error();
    CHECK(mine.find("protocol version mismatch (ours 4, theirs 3)") != std::string::npos);
    const std::string theirs = old_initiates ? i.error() : r.error();
    CHECK(theirs.find("version mismatch") != std::string::npos);
  }
}

TEST_CASE("handshake: a flipped bit in any message fails the handshake", "[net]") {
  Peer a, b;
  std::size_t sizes[] = {Handshake::kM1Bytes, Handshake::kM2Bytes, Handshake::kM3Bytes,
                         Handshake::kM4Bytes};
  for (int which = 1; which <= 4; ++which) {
    for (std::size_t pos = 0; pos < sizes[which - 1]; pos += 3) {
      Handshake i(Role::Initiator, a.params()), r(Role::Responder, b.params());
      drive(i, r, [&](int n, Bytes& m) {
        if (n == which) m[pos] ^= std::uint8_t(1u << (pos % 8));
      });
      INFO("message " << which << " byte " << pos);
      CHECK_FALSE((i.done() && r.done()));
      CHECK((i.failed() || r.failed()));
    }
  }
}

TEST_CASE("handshake: garbage, wrong sizes and replays at each step fail", "[net]") {
  Peer a, b;
  std::mt19937 rng(1234);
  auto garbage = [&](std::size_t n) {
    Bytes g(n);
    for (auto& x : g) x = std::uint8_t(rng());
    return g;
  };
  for (int step = 1; step <= 4; ++step) {
    for (int trial = 0; trial < 20; ++trial) {
      Handshake i(Role::Initiator, a.params()), r(Role::Responder, b.params());
      drive(i, r, [&](int n, Bytes& m) {
        if (n != step) return;
        m = garbage(trial % 2 ? m.size() : rng() % 400);
      });
      CHECK_FALSE((i.done() && r.done()));
      CHECK((i.failed() || r.failed()));
    }
  }
  // M3 from one session replayed into another responder session.
  Handshake i1(Role::Initiator, a.params()), r1(Role::Responder, b.params());
  Bytes m3_old;
  drive(i1, r1, [&](int n, Bytes& m) {
    if (n == 3) m3_old = m;
  });
  Handshake i2(Role::Initiator, a.params()), r2(Role::Responder, b.params());
  drive(i2, r2, [&](int n, Bytes& m) {
    if (n == 3) m = m3_old;
  });
  CHECK(r2.failed());
  // Messages in a finished or failed machine are refused.
  Bytes junk(Handshake::kM1Bytes);
  CHECK(r2.on_message(junk).empty());
  CHECK(r2.failed());
}

TEST_CASE("handshake: connecting to ourselves is refused on both sides as self", "[net]") {
  Peer a;
  Handshake i(Role::Initiator, a.params()), r(Role::Responder, a.params());
  CHECK(drive(i, r) == 4);  // decided on each side by the other's signature
  for (const Handshake* h : {&i, &r}) {
    CHECK(h->failed());
    CHECK(h->error() == "handshake: connected to ourselves");
    CHECK(h->close_reason() == CloseReason::Self);
  }
}

// Issue: two peers started in one folder without --identity share its key file; the second was
// told "connected to ourselves" and both trained alone without a word of advice.
TEST_CASE(
    "handshake: another live peer with our identity key is refused on both sides as "
    "shared_identity, even when the allowlist lacks the key",
    "[net]") {
  Peer a;
  const Allowlist nobody;
  for (const bool clone_initiates : {true, false}) {
    // The same key file in another process: the same identity, another instance.
    HandshakeParams mine = a.params(), clone = a.params();
    clone.instance = a.instance + 1;
    clone.listen_addr = "127.0.0.1:2222";
    mine.allowlist = &nobody;
    Handshake i(Role::Initiator, clone_initiates ? clone : mine);
    Handshake r(Role::Responder, clone_initiates ? mine : clone);
    CHECK(drive(i, r) == 4);
    for (const Handshake* h : {&i, &r}) {
      CHECK(h->failed());
      CHECK(h->close_reason() == CloseReason::SharedIdentity);
      CHECK(h->error() ==
            "handshake: the remote holds this peer's identity key: another live peer uses it");
    }
    // Each side names the other's listen address, from its signed hello.
    CHECK(i.remote_listen_addr() == (clone_initiates ? mine : clone).listen_addr);
    CHECK(r.remote_listen_addr() == (clone_initiates ? clone : mine).listen_addr);
  }
}

TEST_CASE("handshake: other failures keep the typed reason handshake_failed", "[net]") {
  Peer a, b;
  Handshake i(Role::Initiator, a.params(1)), r(Role::Responder, b.params(2));
  drive(i, r);
  CHECK(i.close_reason() == CloseReason::HandshakeFailed);
  CHECK(r.close_reason() == CloseReason::HandshakeFailed);
}

TEST_CASE("handshake: a peer of the previous handshake (magic GTH1) is told to run one release",
          "[net]") {
  Peer a, b;
  Handshake i(Role::Initiator, a.params()), r(Role::Responder, b.params());
  Bytes m1 = i.start();
  REQUIRE(std::memcmp(m1.data(), Handshake::kMagic, 4) == 0);
  std::memcpy(m1.data(), "GTH1", 4);  // the same M1 size and layout before the instance
  CHECK(r.on_message(m1).empty());
  CHECK(r.failed());
  CHECK(r.error().find("the remote speaks handshake 1") != std::string::npos);
  CHECK(r.error().find("run the same release on every peer") != std::string::npos);
}

TEST_CASE("handshake: the message sizes are docs/protocol.md's", "[net]") {
  CHECK(Handshake::kM1Bytes == 69);
  CHECK(Handshake::kM2Bytes == 113);
  CHECK(Handshake::kHelloBytes == 147);
  CHECK(Handshake::kM3Bytes == 291);
  CHECK(Handshake::kM4Bytes == 259);
}
