// Tests of catch-up over the seeded in-memory network: a joiner fetches a live peer's whole state
// bit for bit; one fetch is served at a time; a partner that dies mid-transfer, a bad payload of
// every kind, a busy or unready or missing partner each end in a retry elsewhere or a clean
// give-up with the reason.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "gossip/catch_up/catch_up.hpp"
#include "gossip/dispatcher.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "net/memory/memory_transport.hpp"
#include "tests/gossip_averager_harness.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using net::Millis;

namespace {

constexpr std::uint64_t kFp = 0xfeedbeef12345678ull;
constexpr std::size_t kN = 3000;  // parameters: 36 KB of state, 9 chunks of 4 KiB
constexpr auto kAcceptT = static_cast<std::uint8_t>(CatchUpType::Accept);
constexpr auto kHeaderT = static_cast<std::uint8_t>(CatchUpType::Header);
constexpr auto kChunkT = static_cast<std::uint8_t>(CatchUpType::Chunk);
constexpr auto kEndT = static_cast<std::uint8_t>(CatchUpType::End);

// A trainer's state, as the step context hands it to the server.
struct FakeState final : core::StateSource {
  core::Checkpoint cp;
  int taken = 0;
  core::Checkpoint state() override {
    ++taken;
    return cp;
  }
};

core::Checkpoint make_state(std::uint64_t seed) {
  core::Checkpoint c;
  c.fingerprint = kFp;
  c.step = 1234 + std::int64_t(seed);
  c.epoch = 3;
  c.samples = 39488;
  c.params.resize(kN);
  for (std::size_t i = 0; i < kN; ++i) c.params[i] = std::sin(float(i + seed)) * 3.0f;
  c.params[1] = -0.0f;
  c.params[2] = std::numeric_limits<float>::denorm_min();
  c.opt_state = {std::vector<float>(kN), std::vector<float>(kN)};
  for (std::size_t i = 0; i < kN; ++i) {
    c.opt_state[0][i] = float(i) * 1e-3f;
    c.opt_state[1][i] = 1.0f / float(i + 1);
  }
  c.meta = R"({"model":"test"})";
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A peer that answers requests by script: the hostile or broken partner.
struct Scripted final : net::TransportHandler {
  std::function<void(const net::ConnectionPtr&, std::uint64_t id)> on_request;
  std::vector<CatchUpCode> cancels;
  int closed = 0;
  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& b) override {
    if (type == static_cast<std::uint8_t>(CatchUpType::Request)) {
      const auto m = decode_catch_up_request(b);
      if (on_request) on_request(c, m.id);
    } else if (type == static_cast<std::uint8_t>(CatchUpType::CancelFetch)) {
      cancels.push_back(decode_catch_up_code(b).code);
    }
  }
  void on_closed(const net::ConnectionPtr&, const net::CloseCause&) override { ++closed; }
};

struct Node : avgtest::SimNode {
  std::unique_ptr<CatchUpServer> server;
  std::unique_ptr<CatchUpClient> client;
  std::unique_ptr<Scripted> scripted;
  FakeState state;
  bool stepping = true;  // its training loop passes step boundaries
  std::vector<CatchUpServed> served;
};

class Net {
 public:
  Net() : net(net::SimOptions{}) {}

  // A peer with both sides of catch-up, or (scripted) a hand-driven server.
  Node& add(const std::string& name, bool scripted = false) {
    auto n = std::make_unique<Node>();
    n->attach(net, "10.0.0." + std::to_string(nodes.size() + 1) + ":7000", name);
    if (scripted) {
      n->scripted = std::make_unique<Scripted>();
      n->disp.add(kCatchUpServerFirst, kCatchUpServerLast, n->scripted.get());
    } else {
      CatchUpServerConfig sc;
      sc.fingerprint = kFp;
      sc.chunk_bytes = 4096;
      n->server = std::make_unique<CatchUpServer>(sc, *n->t, n->disp);
      Node* raw = n.get();
      n->server->set_event_callback([raw](const CatchUpServed& e) { raw->served.push_back(e); });
    }
    n->client = std::make_unique<CatchUpClient>(*n->t, n->disp, n->dir);
    n->state.cp = make_state(nodes.size());
    nodes.push_back(std::move(n));
    return *nodes.back();
  }
  static PeerRef ref(const Node& n) { return {n.id, n.addr}; }

  // One step boundary of every stepping peer's training loop.
  void boundaries() {
    for (auto& n : nodes) {
      if (!n->server || !n->stepping || !n->t->alive()) continue;
      core::StepContext ctx{be, nullptr, n->state.cp.params.size(), n->state.cp.step,
                            n->state.cp.samples, 0, int(n->state.cp.epoch), false, &n->state};
      n->server->between_steps(ctx);
    }
  }
  // Advances the virtual clock a millisecond at a time, with a step boundary after each, until
  // pred holds (true) or limit passes (false).
  bool run_until(const std::function<bool()>& pred, Millis limit) {
    const Millis end = net.now() + limit;
    while (net.now() < end) {
      if (pred()) return true;
      net.run_for(Millis(1));
      boundaries();
    }
    return pred();
  }

  static CatchUpClientConfig client_cfg() {
    CatchUpClientConfig c;
    c.fingerprint = kFp;
    c.n_params = kN;
    c.n_opt_state = 2;
    c.deadline = Millis(60000);
    c.seed = 7;
    return c;
  }
  // Starts a fetch by n; the result lands in *out.
  void start(Node& n, std::optional<CatchUpResult>* out, CatchUpClientConfig cfg = client_cfg()) {
    n.client->start(cfg, [out](CatchUpResult r) { *out = std::move(r); });
  }
  std::optional<CatchUpResult> fetch(Node& n, CatchUpClientConfig cfg = client_cfg(),
                                     Millis limit = Millis(120000)) {
    std::optional<CatchUpResult> out;
    start(n, &out, cfg);
    run_until([&] { return out.has_value(); }, limit);
    return out;
  }

  kernels::CpuBackend be;
  net::SimNetwork net;
  std::vector<std::unique_ptr<Node>> nodes;
};

void check_state(const CatchUpResult& r, const core::Checkpoint& want) {
  CHECK(r.state.fingerprint == want.fingerprint);
  CHECK(r.state.step == want.step);
  CHECK(r.state.epoch == want.epoch);
  CHECK(r.state.samples == want.samples);
  CHECK(same_bits(r.state.params, want.params));
  REQUIRE(r.state.opt_state.size() == want.opt_state.size());
  for (std::size_t i = 0; i < want.opt_state.size(); ++i)
    CHECK(same_bits(r.state.opt_state[i], want.opt_state[i]));
  CHECK(r.state.meta == want.meta);
  CHECK(r.bytes == core::encode_checkpoint(want).size());
}

// Sends a whole state the way a server does (Accept, Header, Chunks, End), with the faults of a
// test case applied.
struct Fault {
  std::string name;
  std::string reason;  // the fetch's expected failure reason
  std::function<void(core::Checkpoint&)> edit_state = [](core::Checkpoint&) {};
  std::function<void(CatchUpHeaderMsg&)> edit_header = [](CatchUpHeaderMsg&) {};
  std::function<void(net::Bytes&)> edit_bytes = [](net::Bytes&) {};
  std::size_t drop_tail = 0;        // bytes of the state not sent
  std::uint32_t crc_xor = 0;        // applied to the End checksum
  std::uint64_t offset_shift = 0;   // added to every chunk's offset
  bool malformed_header = false;
};

void send_state(const net::ConnectionPtr& c, std::uint64_t id, const Fault& f) {
  core::Checkpoint st = make_state(99);
  f.edit_state(st);
  net::Bytes bytes = core::encode_checkpoint(st);
  CatchUpHeaderMsg h{id, bytes.size(), st.fingerprint, st.step, st.epoch, st.samples};
  f.edit_header(h);
  f.edit_bytes(bytes);
  c->send(kAcceptT, encode_id(id));
  if (f.malformed_header) {
    c->send(kHeaderT, std::make_shared<net::Bytes>(3, 0));
    return;
  }
  c->send(kHeaderT, encode_catch_up_header(h));
  std::uint32_t crc = 0;
  const std::size_t upto = bytes.size() - f.drop_tail;
  for (std::size_t off = 0; off < upto; off += 4096) {
    const std::size_t len = std::min<std::size_t>(4096, upto - off);
    c->send(kChunkT, encode_chunk(id, off + f.offset_shift, bytes.data() + off, len));
    crc = core::crc32_update(crc, bytes.data() + off, len);
  }
  c->send(kEndT, encode_catch_up_end({id, crc ^ f.crc_xor}));
}

std::vector<Fault> faults() {
  std::vector<Fault> v;
  v.push_back({"a header of another model", "invalid:fingerprint"});
  v.back().edit_header = [](CatchUpHeaderMsg& h) { h.fingerprint ^= 1; };
  v.push_back({"an absurd announced length (refused before allocation)", "invalid:length"});
  v.back().edit_header = [](CatchUpHeaderMsg& h) { h.total_bytes = 1ull << 62; };
  v.push_back({"an announced length below our model's state size", "invalid:length"});
  v.back().edit_header = [](CatchUpHeaderMsg& h) {
    h.total_bytes = core::encoded_checkpoint_bytes(kN, 2, 2 * kN, 0) - 1;
  };
  v.push_back({"a truncated state", "invalid:length"});
  v.back().drop_tail = 100;
  v.push_back({"a chunk at the wrong offset", "invalid:length"});
  v.back().offset_shift = 4096;
  v.push_back({"a wrong end checksum", "invalid:checksum"});
  v.back().crc_xor = 1;
  v.push_back({"a corrupted byte (the end checksum matching it)", "invalid:decode"});
  v.back().edit_bytes = [](net::Bytes& b) { b[200] ^= 0x40; };
  v.push_back({"a NaN parameter", "invalid:non-finite"});
  v.back().edit_state = [](core::Checkpoint& c) { c.params[17] = std::nanf(""); };
  v.push_back({"an infinite optimizer state value", "invalid:non-finite"});
  v.back().edit_state = [](core::Checkpoint& c) {
    c.opt_state[1][kN - 1] = std::numeric_limits<float>::infinity();
  };
  v.push_back({"a state of another model under a matching header", "invalid:fingerprint"});
  v.back().edit_state = [](core::Checkpoint& c) { c.fingerprint ^= 1; };
  v.back().edit_header = [](CatchUpHeaderMsg& h) { h.fingerprint = kFp; };
  v.push_back({"the optimizer state in other shapes", "invalid:size"});
  v.back().edit_state = [](core::Checkpoint& c) {
    c.opt_state[0].insert(c.opt_state[0].end(), c.opt_state[1].begin(), c.opt_state[1].end());
    c.opt_state.pop_back();
    c.meta += "12345678";  // the same total length: only the decoded shapes differ
  };
  v.push_back({"counters other than the header's", "invalid:counters"});
  v.back().edit_header = [](CatchUpHeaderMsg& h) { h.step += 1; };
  v.push_back({"a malformed header", "protocol"});
  v.back().malformed_header = true;
  return v;
}

}  // namespace

TEST_CASE("a joiner fetches a live peer's whole state, bit for bit", "[gossip][catchup]") {
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  b.dir.peers = {Net::ref(a)};
  n.run_until([] { return false; }, Millis(5));  // a passes step boundaries: it has a state
  const auto r = n.fetch(b);
  REQUIRE(r);
  INFO(r->reason);
  REQUIRE(r->ok);
  CHECK(r->reason.empty());
  CHECK(r->from == "peer-a");
  CHECK(r->attempts == 1);
  check_state(*r, a.state.cp);
  CHECK(a.state.taken == 1);  // one copy of the state, at one step boundary
  REQUIRE(a.served.size() == 1);
  CHECK(a.served[0].ok);
  CHECK(a.served[0].peer == "peer-b");
  CHECK(a.served[0].step == a.state.cp.step);
  CHECK(a.served[0].bytes == r->bytes);
  CHECK(a.server->served_ok() == 1);
  CHECK_FALSE(b.client->running());
}

TEST_CASE("one fetch is served at a time: the second fetcher hears BUSY and is served after",
          "[gossip][catchup]") {
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  Node& c = n.add("peer-c");
  b.dir.peers = c.dir.peers = {Net::ref(a)};
  n.run_until([] { return false; }, Millis(5));
  std::optional<CatchUpResult> rb, rc;
  n.start(b, &rb);
  n.start(c, &rc);
  REQUIRE(n.run_until([&] { return rb && rc; }, Millis(30000)));
  CHECK(rb->ok);
  CHECK(rc->ok);
  check_state(*rb, a.state.cp);
  check_state(*rc, a.state.cp);
  CHECK(std::max(rb->attempts, rc->attempts) == 2);  // the busy one asked again
  REQUIRE(a.served.size() == 2);
  CHECK(a.state.taken == 2);
}

TEST_CASE("a partner that dies mid-transfer: the joiner fetches from another, or gives up",
          "[gossip][catchup]") {
  const bool reset = GENERATE(true, false);  // a crash the kernel reports, or a silent one
  INFO((reset ? "partner's connection reset" : "partner silent"));
  Net n;
  Node& e = n.add("peer-dying", true);
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  bool half_sent = false;
  e.scripted->on_request = [&](const net::ConnectionPtr& c, std::uint64_t id) {
    core::Checkpoint st = make_state(99);
    const auto bytes = core::encode_checkpoint(st);
    c->send(kAcceptT, encode_id(id));
    c->send(kHeaderT, encode_catch_up_header({id, bytes.size(), kFp, st.step, st.epoch, st.samples}));
    c->send(kChunkT, encode_chunk(id, 0, bytes.data(), 4096));
    half_sent = true;  // and nothing more, ever
  };
  b.dir.peers = {Net::ref(e)};
  auto cfg = Net::client_cfg();
  cfg.transfer_timeout_floor = Millis(2000);
  std::optional<CatchUpResult> r;
  n.start(b, &r, cfg);
  REQUIRE(n.run_until([&] { return half_sent; }, Millis(1000)));
  n.run_until([] { return false; }, Millis(20));  // the first chunk is in
  n.net.kill(e.addr, reset);

  SECTION("another live peer: fetched from it") {
    b.dir.peers.push_back(Net::ref(a));
    REQUIRE(n.run_until([&] { return r.has_value(); }, Millis(30000)));
    INFO(r->reason);
    CHECK(r->ok);
    CHECK(r->from == "peer-a");
    CHECK(r->attempts == 2);
    check_state(*r, a.state.cp);
  }
  SECTION("no other peer: gives up with the reason") {
    REQUIRE(n.run_until([&] { return r.has_value(); }, Millis(30000)));
    CHECK_FALSE(r->ok);
    CHECK(r->reason == (reset ? "closed" : "timeout:transfer"));
    CHECK(r->attempts == 1);
    CHECK(r->state.params.empty());  // all or nothing
    CHECK(r->ms < 10000);            // long before the 60 s deadline
  }
}

TEST_CASE("a bad payload is refused whole, the partner told, and another partner used",
          "[gossip][catchup]") {
  for (const Fault& f : faults()) {
    SECTION(f.name) {
      Net n;
      Node& e = n.add("peer-evil", true);
      Node& a = n.add("peer-a");
      Node& b = n.add("peer-b");
      e.scripted->on_request = [&](const net::ConnectionPtr& c, std::uint64_t id) {
        send_state(c, id, f);
      };
      b.dir.peers = {Net::ref(e)};
      n.run_until([] { return false; }, Millis(5));
      auto r = n.fetch(b);
      REQUIRE(r);
      CHECK_FALSE(r->ok);
      CHECK(r->reason == f.reason);
      CHECK(r->attempts == 1);
      CHECK(r->state.params.empty());
      CHECK(r->ms < 1000);  // refused on arrival, not at a deadline
      n.run_until([] { return false; }, Millis(50));
      CHECK(e.scripted->closed == 1);  // the attempt's connection is closed
      if (f.reason != "protocol") {
        REQUIRE(e.scripted->cancels.size() == 1);
        const auto want = f.reason == "invalid:fingerprint" && f.name.rfind("a header", 0) == 0
                              ? CatchUpCode::Fingerprint
                              : CatchUpCode::Invalid;
        CHECK(e.scripted->cancels[0] == want);
      }

      b.dir.peers = {Net::ref(e), Net::ref(a)};
      r = n.fetch(b);
      REQUIRE(r);
      CHECK(r->ok);
      CHECK(r->from == "peer-a");
      check_state(*r, a.state.cp);
    }
  }
}

TEST_CASE("no partner to fetch from: the joiner gives up at once or at the deadline, with the "
          "reason", "[gossip][catchup]") {
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  Node& c = n.add("peer-c");

  SECTION("nobody live: at once") {
    const auto r = n.fetch(b);
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->reason == "no-peer");
    CHECK(r->attempts == 0);
    CHECK(r->ms <= 1);
  }
  SECTION("only peers without a trained state (a launch starting together): at once") {
    a.stepping = c.stepping = false;  // joiners themselves: no step taken yet
    b.dir.peers = {Net::ref(a), Net::ref(c)};
    const auto r = n.fetch(b);
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->reason == "not-ready");
    CHECK(r->attempts == 2);
    CHECK(r->ms < 100);
  }
  SECTION("the only peer is unreachable: after the connect timeout") {
    n.net.kill(a.addr);
    b.dir.peers = {Net::ref(a)};
    const auto r = n.fetch(b);
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->reason == "connect");
    CHECK(r->ms <= 1100);
  }
  SECTION("the only peer stays busy: at the deadline") {
    // a accepts c's fetch, but its training thread never reaches a step boundary to take the
    // state: a stays busy until its state timeout (30 s), beyond b's deadline.
    a.stepping = true;
    n.run_until([] { return false; }, Millis(5));
    a.stepping = false;
    c.dir.peers = b.dir.peers = {Net::ref(a)};
    std::optional<CatchUpResult> rc;
    n.start(c, &rc);
    n.run_until([] { return false; }, Millis(50));
    auto cfg = Net::client_cfg();
    cfg.deadline = Millis(3000);
    const auto r = n.fetch(b, cfg);
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->reason == "deadline:busy");
    CHECK(r->ms == Approx(3000).margin(2));
    CHECK(r->attempts >= 5);  // asked again every 500 ms
    // ... and c, accepted but never sent a state, hears the server give up at its state timeout.
    REQUIRE(n.run_until([&] { return rc.has_value(); }, Millis(40000)));
    CHECK_FALSE(rc->ok);
    CHECK(rc->reason == "peer-abort:timeout");
    REQUIRE(a.served.size() == 1);
    CHECK(a.served[0].reason == "timeout:state");
  }
}

// Issue 44: a cohort's peer (--min-peers above 1) without a checkpoint catches up only from a
// member whose state carries the run on (resumed from its checkpoint: the run was resized), and
// not at all when every member started fresh with it (the run's first start).
TEST_CASE("a cohort's fetcher takes a state only from a member that carries the run on",
          "[gossip][catchup]") {
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  Node& c = n.add("peer-c");
  b.dir.peers = {Net::ref(a), Net::ref(c)};
  c.stepping = false;
  n.run_until([] { return false; }, Millis(5));  // a has taken steps: it could serve
  auto cfg = Net::client_cfg();
  cfg.resumed_only = true;
  auto c_steps = [&] {
    c.stepping = true;
    n.run_until([] { return false; }, Millis(5));
  };

  SECTION("everybody fresh (a first start): no state taken, at once") {
    c_steps();
    const auto r = n.fetch(b, cfg);
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    CHECK(r->reason == "fresh");
    CHECK(r->attempts == 2);
    CHECK(r->ms < 100);
    CHECK(a.state.taken + c.state.taken == 0);
  }
  SECTION("one member resumed: its state, whichever is asked first") {
    c_steps();
    c.server->set_carries_run(true);
    const auto r = n.fetch(b, cfg);
    REQUIRE(r);
    INFO(r->reason);
    REQUIRE(r->ok);
    CHECK(r->from == "peer-c");
    check_state(*r, c.state.cp);
    CHECK(a.state.taken == 0);
  }
  SECTION("the resumed member has not taken its first step yet: asked again until it has") {
    c.server->set_carries_run(true);
    std::optional<CatchUpResult> r;
    n.start(b, &r, cfg);
    n.run_until([&] { return r.has_value(); }, Millis(1200));
    CHECK_FALSE(r.has_value());  // still asking c
    c.stepping = true;
    REQUIRE(n.run_until([&] { return r.has_value(); }, Millis(5000)));
    INFO(r->reason);
    CHECK(r->ok);
    CHECK(r->from == "peer-c");
    CHECK(r->attempts >= 3);
  }
  SECTION("a plain request (a late joiner) is served by a fresh member as before") {
    const auto r = n.fetch(b);
    REQUIRE(r);
    CHECK(r->ok);
  }
}

TEST_CASE("a cohort's fetcher stops after max_fresh members said they started fresh",
          "[gossip][catchup]") {
  Net n;
  Node& b = n.add("peer-b");
  for (int i = 0; i < 6; ++i) {
    Node& p = n.add("peer-" + std::to_string(i));
    b.dir.peers.push_back(Net::ref(p));
  }
  n.run_until([] { return false; }, Millis(5));
  auto cfg = Net::client_cfg();
  cfg.resumed_only = true;
  cfg.max_fresh = 3;
  const auto r = n.fetch(b, cfg);
  REQUIRE(r);
  CHECK_FALSE(r->ok);
  CHECK(r->reason == "fresh");
  CHECK(r->attempts == 3);
}

TEST_CASE("a fetcher of another model is refused", "[gossip][catchup]") {
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  b.dir.peers = {Net::ref(a)};
  n.run_until([] { return false; }, Millis(5));
  auto cfg = Net::client_cfg();
  std::string want;
  SECTION("another fingerprint") {
    cfg.fingerprint = kFp + 1;
    want = "refused:fingerprint";
  }
  SECTION("another parameter count") {
    cfg.n_params = kN + 1;
    want = "refused:size";
  }
  const auto r = n.fetch(b, cfg);
  REQUIRE(r);
  CHECK_FALSE(r->ok);
  CHECK(r->reason == want);
  CHECK(a.state.taken == 0);
  CHECK(a.served.empty());
}

TEST_CASE("catch-up messages: exact sizes, impossible values refused", "[gossip][catchup]") {
  using base::DecodeError;
  const CatchUpHeaderMsg h{9, 1000, kFp, 5, 1, 160};
  auto hb = encode_catch_up_header(h);
  CHECK((*hb)[0] == kCatchUpWireVersion);
  const CatchUpHeaderMsg back = decode_catch_up_header(*hb);
  CHECK(back.total_bytes == 1000);
  CHECK(back.step == 5);
  net::Bytes longer = *hb;
  longer.push_back(0);
  CHECK_THROWS_AS(decode_catch_up_header(longer), DecodeError);
  CHECK_THROWS_AS(decode_catch_up_header(net::Bytes(hb->begin(), hb->end() - 1)), DecodeError);
  auto neg = encode_catch_up_header({9, 1000, kFp, -1, 1, 160});
  CHECK_THROWS_AS(decode_catch_up_header(*neg), DecodeError);
  net::Bytes other = *hb;
  other[0] = kCatchUpWireVersion + 1;
  CHECK_THROWS_AS(decode_catch_up_header(other), DecodeError);  // another wire version

  auto eb = encode_catch_up_end({9, 0xdeadbeef});
  CHECK(decode_catch_up_end(*eb).crc32 == 0xdeadbeef);
  auto cb = encode_catch_up_code(9, CatchUpCode::NotReady);
  CHECK(decode_catch_up_code(*cb).code == CatchUpCode::NotReady);
  net::Bytes bad = *cb;
  bad[9] = 200;  // no such code
  CHECK_THROWS_AS(decode_catch_up_code(bad), DecodeError);
  CHECK_THROWS_AS(decode_catch_up_request(net::Bytes(24)), DecodeError);
  const auto req = decode_catch_up_request(*encode_catch_up_request({3, kFp, 1000}));
  CHECK(req.n_params == 1000);
  CHECK_FALSE(req.resumed_only);
  // Without the flag the request keeps its first layout (servers built before it read it); with
  // it, one flags byte more, whose other bits must be clear.
  CHECK(encode_catch_up_request({3, kFp, 1000})->size() == kCatchUpRequestBytes);
  auto flagged = encode_catch_up_request({3, kFp, 1000, true});
  REQUIRE(flagged->size() == kCatchUpRequestFlagsBytes);
  const auto fr = decode_catch_up_request(*flagged);
  CHECK(fr.resumed_only);
  CHECK(fr.id == 3);
  CHECK(fr.n_params == 1000);
  net::Bytes zero_flags = *flagged;
  zero_flags.back() = 0;
  CHECK_FALSE(decode_catch_up_request(zero_flags).resumed_only);
  net::Bytes odd_flags = *flagged;
  odd_flags.back() = 2;
  CHECK_THROWS_AS(decode_catch_up_request(odd_flags), DecodeError);
  net::Bytes too_long = *flagged;
  too_long.push_back(0);
  CHECK_THROWS_AS(decode_catch_up_request(too_long), DecodeError);
  auto fresh = encode_catch_up_code(9, CatchUpCode::Fresh);
  CHECK(decode_catch_up_code(*fresh).code == CatchUpCode::Fresh);
  CHECK(catch_up_code_name(CatchUpCode::Fresh) == "fresh");
}

TEST_CASE("a resumed peer serves its state before its first step", "[gossip][catchup]") {
  // gossip-peer's cohort (--min-peers above 1) after a resize: the peers with a checkpoint went
  // on from it, the one added has none (docs/cluster.md, "One run").
  Net n;
  Node& a = n.add("peer-a");
  Node& b = n.add("peer-b");
  b.dir.peers = {Net::ref(a)};
  SECTION("a resumed peer accepts before its first step and sends its state at that step") {
    a.stepping = false;  // waiting for its cohort: no step boundary yet
    std::optional<CatchUpResult> r;
    n.start(b, &r);
    n.run_until([&] { return r.has_value(); }, Millis(50));
    REQUIRE(r);
    CHECK(r->reason == "not-ready");  // without a checkpoint: refused, as before
    a.server->trained_state_ready(kN);  // resumed from its checkpoint
    r.reset();
    n.start(b, &r);
    n.run_until([&] { return r.has_value(); }, Millis(50));
    CHECK_FALSE(r.has_value());  // accepted, waiting for its first step boundary
    a.stepping = true;  // the cohort met: training starts
    REQUIRE(n.run_until([&] { return r.has_value(); }, Millis(5000)));
    CHECK(r->ok);
    check_state(*r, a.state.cp);
  }
}

// The client decides on typed failures (busy: ask again; refused:not-ready: no trained state); the
// tokens are what the catch_up metric line and CatchUpResult::reason carry: they stay as they were.
TEST_CASE("catch-up failure reasons: one stable token per kind", "[gossip][catchup]") {
  using F = CatchUpFailure;
  const std::vector<std::pair<CatchUpFailureReason, std::string>> want = {
      {{F::Connect}, "connect"},
      {{F::Closed}, "closed"},
      {{F::Busy}, "busy"},
      {{F::Refused, CatchUpCode::NotReady}, "refused:not-ready"},
      {{F::Refused, CatchUpCode::Fingerprint}, "refused:fingerprint"},
      {{F::Protocol}, "protocol"},
      {{F::PeerAbort, CatchUpCode::Shutdown}, "peer-abort:shutdown"},
      {{F::TimeoutConnect}, "timeout:connect"},
      {{F::TimeoutAnswer}, "timeout:answer"},
      {{F::TimeoutState}, "timeout:state"},
      {{F::TimeoutTransfer}, "timeout:transfer"},
      {{F::InvalidFingerprint}, "invalid:fingerprint"},
      {{F::InvalidLength}, "invalid:length"},
      {{F::InvalidChecksum}, "invalid:checksum"},
      {{F::InvalidDecode}, "invalid:decode"},
      {{F::InvalidSize}, "invalid:size"},
      {{F::InvalidCounters}, "invalid:counters"},
      {{F::InvalidNonFinite}, "invalid:non-finite"},
  };
  for (const auto& [r, token] : want) CHECK(to_string(r) == token);
  // Only refused and peer-abort carry their code.
  CHECK(to_string({F::Busy, CatchUpCode::NotReady}) == "busy");
}
