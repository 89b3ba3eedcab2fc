// ExchangeProtocol driven directly: fake connections and a fake port, no threads, no sockets, no
// timers (a deadline "expires" when the test calls on_timer).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gossip/exchange/exchange_protocol.hpp"
#include "gossip/exchange/partner_schedule.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using net::Millis;

namespace {

constexpr std::uint64_t kFp = 0xF1;
constexpr std::size_t kN = 4;  // fp32 values: 16 bytes, one chunk each way
using Type = ExchangeType;

class FakeConnection final : public net::Connection {
 public:
  explicit FakeConnection(std::string peer) : peer_(std::move(peer)) {}
  const std::string& peer_id() const override { return peer_; }
  const std::string& remote_addr() const override { return addr_; }
  bool send(std::uint8_t type, net::SharedBytes payload) override {
    if (!open_ || refuse_sends) return false;
    sent.emplace_back(type, *payload);
    return true;
  }
  using net::Connection::close;
  void close(net::CloseCause cause) override {
    open_ = false;
    closed_reason = cause.text();
  }
  bool is_open() const override { return open_; }

  // The messages of one type sent so far.
  std::vector<net::Bytes> of(Type t) const {
    std::vector<net::Bytes> v;
    for (auto& [ty, b] : sent)
      if (ty == static_cast<std::uint8_t>(t)) v.push_back(b);
    return v;
  }
  std::vector<std::pair<std::uint8_t, net::Bytes>> sent;
  std::string closed_reason;
  bool refuse_sends = false;

 private:
  std::string peer_, addr_ = "10.0.0.9:1";
  bool open_ = true;
};

class FakeDirectory final : public PeerDirectory {
 public:
  std::vector<PeerRef> peers;
  std::vector<PeerRef> live_peers() const override { return peers; }
};

class FakePort final : public ExchangePort {
 public:
  Millis t{1000};
  std::map<Timer, std::pair<std::uint64_t, Millis>> armed;
  std::vector<std::pair<std::uint64_t, std::string>> dials;
  std::map<std::string, net::ConnectionPtr> pool_;
  std::size_t n = kN;
  std::optional<std::uint64_t> claim_seq;  // nullopt: busy
  ChunkSetPtr standing;
  std::vector<std::pair<std::uint64_t, bool>> releases;
  std::vector<std::pair<std::uint64_t, Commit>> commits;
  std::vector<net::Bytes> delivered;
  int boundaries = 0;
  std::vector<ExchangeEvent> events;
  std::vector<BanEvent> bans;
  std::map<Counter, int> counters;

  Millis now() const override { return t; }
  void arm(Timer tm, std::uint64_t seq, Millis d) override { armed[tm] = {seq, d}; }
  void cancel(Timer tm) override { armed.erase(tm); }
  void dial(std::uint64_t seq, const PeerRef& p) override { dials.emplace_back(seq, p.id); }
  net::ConnectionPtr pooled(const std::string& peer) override {
    auto it = pool_.find(peer);
    return it != pool_.end() && it->second->is_open() ? it->second : nullptr;
  }
  bool has_pooled(const std::string& peer) override { return pool_.count(peer) != 0; }
  void pool(const std::string& peer, net::ConnectionPtr c) override { pool_[peer] = c; }
  void touch_pooled(const std::string&) override {}
  void forget_pooled(const std::string& peer) override { pool_.erase(peer); }
  void forget_pooled(const net::ConnectionPtr& c) override {
    for (auto it = pool_.begin(); it != pool_.end(); ++it)
      if (it->second == c) return void(pool_.erase(it));
  }
  void close_pooled(const std::string& peer, const std::string& reason) override {
    if (auto c = pooled(peer)) c->close(net::CloseReason::NotNeeded, reason);
    pool_.erase(peer);
  }
  void idle_close_pooled(const std::string&) override {}
  std::size_t n_params() const override { return n; }
  std::int64_t own_samples() const override { return 30; }
  double own_progress() const override { return 0.25; }
  std::int64_t own_step() const override { return 40; }
  void heard_step(const std::string& partner, std::int64_t step) override { heard[partner] = step; }
  std::map<std::string, std::int64_t> heard;
  void heard_payload(const std::string& partner, std::uint64_t hash) override {
    payloads[partner].push_back(hash);
  }
  std::map<std::string, std::vector<std::uint64_t>> payloads;
  double max_rate() const override { return 0; }
  std::optional<std::uint64_t> claim(ChunkSetPtr& own, WireFormat) override {
    if (claim_seq) own = standing;
    return claim_seq;
  }
  void want_snapshot(std::uint64_t seq, WireFormat w) override { wanted.emplace_back(seq, w); }
  std::vector<std::pair<std::uint64_t, WireFormat>> wanted;
  void release(std::uint64_t seq, bool no_peer) override { releases.emplace_back(seq, no_peer); }
  void commit(std::uint64_t seq, const Commit& c) override { commits.emplace_back(seq, c); }
  void deliver(std::uint64_t, net::Bytes&& chunk, bool, bool, const std::string&,
               WireFormat) override {
    delivered.push_back(std::move(chunk));
  }
  void request_boundary() override { ++boundaries; }
  Verdict judge(const std::string&, double norm, const std::function<double()>&) override {
    Verdict v;
    v.norm = norm;
    return v;
  }
  bool add_sq_diff(const ChunkSet*, const std::uint8_t*, std::size_t, std::size_t,
                   double&) override {
    return false;
  }
  double own_sq_norm(const ChunkSet&) override { return 0; }
  void finished(const ExchangeEvent& ev) override { events.push_back(ev); }
  void ban_started(const BanEvent& b) override { bans.push_back(b); }
  void count(Counter c) override { ++counters[c]; }
  void silent(const std::string& partner) override { silent_.push_back(partner); }
  std::vector<std::string> silent_;
};

ExchangeConfig config() {
  ExchangeConfig c;
  c.fingerprint = kFp;
  c.chunk_bytes = kN * sizeof(float);
  c.max_tries = 1;
  c.seed = 3;
  return c;
}

// Our snapshot: one chunk, all of it cut.
ChunkSetPtr snapshot(float base) {
  auto own = std::make_shared<ChunkSet>();
  auto c = std::make_shared<net::Bytes>(kChunkHeaderBytes + kN * sizeof(float));
  for (std::size_t i = 0; i < kN; ++i) {
    const float v = base + float(i);
    std::memcpy(c->data() + kChunkHeaderBytes + i * sizeof(float), &v, sizeof v);
  }
  own->chunks.push_back(c);
  own->payload_bytes = kN * sizeof(float);
  own->ready.store(1);
  return own;
}

net::Bytes partner_chunk(std::uint64_t id, float value = 5.0f) {
  std::vector<float> v(kN, value);
  return *encode_chunk(id, 0, reinterpret_cast<const std::uint8_t*>(v.data()), kN * 4);
}

struct Fixture {
  FakePort port;
  FakeDirectory dir;
  ExchangeProtocol p;
  std::shared_ptr<FakeConnection> conn = std::make_shared<FakeConnection>("peer-b");
  explicit Fixture(ExchangeConfig cfg = config()) : p(cfg, port, dir, "peer-a") {
    dir.peers = {{"peer-a", "10.0.0.1:7000"}, {"peer-b", "10.0.0.2:7000"}};
  }
  void msg(Type t, const net::Bytes& b) {
    p.on_message(conn, static_cast<std::uint8_t>(t), net::Bytes(b));
  }
  void msg(Type t, const net::SharedBytes& b) { msg(t, *b); }
  // Initiator seq 1, asked peer-b (dialled) and sent the request: its exchange id.
  std::uint64_t asked() {
    p.start(1, 100);
    REQUIRE(port.dials.size() == 1);
    CHECK(port.dials[0].second == "peer-b");
    CHECK(port.armed.at(ExchangePort::Timer::Deadline).first == 1);
    p.on_dialled(1, "peer-b", conn, {});
    REQUIRE(conn->of(Type::Request).size() == 1);
    return decode_request(conn->of(Type::Request)[0]).exchange_id;
  }
  // A request from peer-b that we answer as responder.
  RequestMsg request(std::uint64_t id = 55, std::uint64_t fp = kFp) {
    RequestMsg m{id, fp, kN, WireFormat::Fp32, false, 10};
    msg(Type::Request, encode_request(m));
    return m;
  }
};

}  // namespace

TEST_CASE("exchange protocol: initiator happy path, request to commit and event",
          "[gossip][protocol]") {
  Fixture f;
  const std::uint64_t id = f.asked();
  const RequestMsg req = decode_request(f.conn->of(Type::Request)[0]);
  CHECK(req.fingerprint == kFp);
  CHECK(req.n_params == kN);
  CHECK(req.samples == 100);
  CHECK(req.progress == 0.25);  // the port's own_progress()
  CHECK(req.step == 40);        // and own_step()
  CHECK(f.port.pool_.count("peer-b"));
  f.p.snapshot_ready(1, snapshot(1.0f));
  CHECK(f.conn->of(Type::Chunk).empty());  // nothing before the ACCEPT
  f.msg(Type::Accept, encode_accept({id, 300, 0.625, 9000}));
  CHECK(f.port.heard["peer-b"] == 9000);  // its step, for robust mixing's progress gap
  REQUIRE(f.conn->of(Type::Chunk).size() == 1);
  const ChunkView cv = decode_chunk(f.conn->of(Type::Chunk)[0]);
  CHECK(cv.exchange_id == id);
  CHECK(cv.offset == 0);
  CHECK(cv.size == kN * 4);
  f.msg(Type::Chunk, partner_chunk(id));
  CHECK(f.port.delivered.size() == 1);
  // The sample of its whole payload, once, before the vote (a replay test for robust mixing).
  const net::Bytes& got = f.port.delivered[0];
  REQUIRE(f.port.payloads["peer-b"].size() == 1);
  CHECK(f.port.payloads["peer-b"][0] == payload_sample(got.data() + kChunkHeaderBytes, 0, kN * 4) +
                                            std::uint64_t(WireFormat::Fp32));
  REQUIRE(f.conn->of(Type::Valid).size() == 1);  // every value checked: our vote
  CHECK(f.port.commits.empty());                 // theirs is still missing
  f.msg(Type::Valid, encode_id(id));
  REQUIRE(f.port.commits.size() == 1);
  CHECK(f.port.commits[0].first == 1);
  CHECK(f.port.commits[0].second.w == 0.5f);
  CHECK(f.port.armed.empty());  // no deadline left
  CHECK(f.p.committed());
  CHECK(f.port.events.empty());  // reported once applied
  f.p.applied(1);
  REQUIRE(f.port.events.size() == 1);
  const ExchangeEvent& ev = f.port.events[0];
  CHECK(ev.ok);
  CHECK(ev.role == ExchangeRole::Initiator);
  CHECK(ev.partner == "peer-b");
  CHECK(ev.exchange_id == id);
  CHECK(ev.bytes_sent == kChunkHeaderBytes + kN * 4);
  CHECK(ev.bytes_received == kChunkHeaderBytes + kN * 4);
  CHECK(ev.partner_progress == 0.625);  // what its ACCEPT said
  CHECK(f.conn->is_open());
}

TEST_CASE("exchange protocol: a clip both sides voted for stays at the honest-drift floor",
          "[gossip][protocol]") {
  // Both votes clip (each side found the other far, as two peers that drifted apart do): the
  // agreed factor is at least suspect_min_clip. One side alone clipping (a stale vector's
  // sender finds every peer equally far and clips nobody): the factor as computed.
  ExchangeConfig cfg = config();
  cfg.needs_norm = true;
  const double floor = cfg.robust.suspect_min_clip;
  struct Case {
    double peer_tau;
    double want_clip;
  };
  for (const Case c : {Case{2e-4, floor}, Case{30.0, 1e-4}}) {
    Fixture f(cfg);
    const std::uint64_t id = f.asked();
    f.p.snapshot_ready(1, snapshot(1.0f));
    f.msg(Type::Accept, encode_accept({id, 300, 0.5, 40}));
    f.msg(Type::Chunk, partner_chunk(id));
    Verdict v;
    v.norm = 10.0;
    v.tau = 1e-3;  // our suspect clip, decayed: c = 1e-4
    f.p.validated(1, v);
    f.msg(Type::Valid, encode_valid({id, c.peer_tau, 10.0}));
    REQUIRE(f.port.commits.size() == 1);
    CHECK(f.port.commits[0].second.w == Approx(0.5 * c.want_clip));
  }
}

TEST_CASE("exchange protocol: responder happy path with a standing snapshot",
          "[gossip][protocol]") {
  ExchangeConfig cfg = config();
  cfg.weight_by_samples = true;
  Fixture f(cfg);
  f.port.claim_seq = 7;
  f.port.standing = snapshot(2.0f);
  RequestMsg m{55, kFp, kN, WireFormat::Fp32, true, 10};
  f.msg(Type::Request, encode_request(m));
  REQUIRE(f.conn->of(Type::Accept).size() == 1);
  const AcceptMsg acc = decode_accept(f.conn->of(Type::Accept)[0]);
  CHECK(acc.exchange_id == 55);
  CHECK(acc.samples == 30);
  CHECK(f.conn->of(Type::Chunk).size() == 1);  // streamed at once
  CHECK(f.port.boundaries == 0);               // no snapshot to wait for
  CHECK(f.port.armed.at(ExchangePort::Timer::Deadline).first == 7);
  f.msg(Type::Chunk, partner_chunk(55));
  f.msg(Type::Valid, encode_id(55));
  REQUIRE(f.port.commits.size() == 1);
  CHECK(f.port.commits[0].second.w == Approx(10.0 / 40.0));  // n_other / (n_self + n_other)
  f.p.applied(7);
  REQUIRE(f.port.events.size() == 1);
  CHECK(f.port.events[0].ok);
  CHECK(f.port.events[0].role == ExchangeRole::Responder);
}

// A responder in the transfer of another exchange holds one request (ExchangeConfig::hold_max)
// and answers it when that exchange ends, instead of BUSY at once (issue 47: with steps well under
// a millisecond, a requester told BUSY lost many steps before it asked again).
TEST_CASE("exchange protocol: a request held behind a transfer is answered when it ends",
          "[gossip][protocol]") {
  Fixture f;
  auto other = std::make_shared<FakeConnection>("peer-c");
  auto request_from_c = [&](std::uint64_t id) {
    RequestMsg m{id, kFp, kN, WireFormat::Fp32, false, 10};
    f.p.on_message(other, static_cast<std::uint8_t>(Type::Request), net::Bytes(*encode_request(m)));
  };
  // A first exchange as responder: its transfer time is what a hold is sized against.
  f.port.claim_seq = 7;
  f.port.standing = snapshot(2.0f);
  f.request(55);
  f.msg(Type::Chunk, partner_chunk(55));
  f.msg(Type::Valid, encode_id(55));
  REQUIRE(f.port.commits.size() == 1);
  f.p.applied(7);
  // The second one is in its transfer (ACCEPT sent, the partner's vector not in yet).
  f.port.claim_seq = 8;
  f.request(56);
  REQUIRE(f.conn->of(Type::Accept).size() == 2);
  f.port.claim_seq.reset();  // the averager is busy with it
  SECTION("held, then accepted once the exchange in flight commits") {
    request_from_c(77);
    CHECK(other->sent.empty());  // neither BUSY nor ACCEPT yet
    CHECK(f.port.counters[ExchangePort::Counter::Held] == 1);
    CHECK(f.port.armed.at(ExchangePort::Timer::Hold).second == ExchangeConfig{}.hold_max);
    request_from_c(78);  // one held at a time: the next is BUSY at once
    REQUIRE(other->of(Type::Busy).size() == 1);
    CHECK(decode_id(other->of(Type::Busy)[0]).exchange_id == 78);
    f.port.claim_seq = 9;  // free again once committed
    f.port.standing = nullptr;
    f.msg(Type::Chunk, partner_chunk(56));
    f.msg(Type::Valid, encode_id(56));
    REQUIRE(f.port.commits.size() == 2);
    REQUIRE(other->of(Type::Accept).size() == 1);
    CHECK(decode_accept(other->of(Type::Accept)[0]).exchange_id == 77);
    CHECK(f.port.armed.count(ExchangePort::Timer::Hold) == 0);
    CHECK(f.p.in_flight());
    // Its snapshot follows the mix of the one before (a step boundary): asked for, not sent.
    CHECK(other->of(Type::Chunk).empty());
    CHECK(f.port.counters[ExchangePort::Counter::BusySent] == 1);
  }
  SECTION("BUSY after all when the exchange in flight outlasts the hold") {
    request_from_c(77);
    f.p.on_timer(ExchangePort::Timer::Hold, 0);
    REQUIRE(other->of(Type::Busy).size() == 1);
    CHECK(decode_id(other->of(Type::Busy)[0]).exchange_id == 77);
    f.port.claim_seq = 9;
    f.msg(Type::Chunk, partner_chunk(56));
    f.msg(Type::Valid, encode_id(56));
    CHECK(other->of(Type::Accept).empty());  // nothing held any more
  }
  SECTION("dropped when its connection closes; answered when the exchange fails") {
    request_from_c(77);
    other->close(net::CloseReason::Shutdown, "gone");
    f.p.on_closed(other, {net::CloseReason::Shutdown, "gone"});
    CHECK(f.port.armed.count(ExchangePort::Timer::Hold) == 0);
    auto third = std::make_shared<FakeConnection>("peer-d");
    RequestMsg m{79, kFp, kN, WireFormat::Fp32, false, 10};
    f.p.on_message(third, static_cast<std::uint8_t>(Type::Request), net::Bytes(*encode_request(m)));
    CHECK(third->sent.empty());  // held in its place
    f.port.claim_seq = 9;
    f.msg(Type::Abort, encode_code(56, ExchangeCode::Timeout));  // the exchange in flight fails
    REQUIRE(third->of(Type::Accept).size() == 1);
    CHECK(decode_accept(third->of(Type::Accept)[0]).exchange_id == 79);
  }
  SECTION("no hold with hold_max 0") {
    ExchangeConfig cfg = config();
    cfg.hold_max = Millis(0);
    Fixture g(cfg);
    g.port.claim_seq = 7;
    g.port.standing = snapshot(2.0f);
    g.request(55);
    g.msg(Type::Chunk, partner_chunk(55));
    g.msg(Type::Valid, encode_id(55));
    g.p.applied(7);
    g.port.claim_seq = 8;
    g.request(56);
    g.port.claim_seq.reset();
    auto c2 = std::make_shared<FakeConnection>("peer-c");
    RequestMsg m{77, kFp, kN, WireFormat::Fp32, false, 10};
    g.p.on_message(c2, static_cast<std::uint8_t>(Type::Request), net::Bytes(*encode_request(m)));
    CHECK(c2->of(Type::Busy).size() == 1);
  }
}

TEST_CASE("exchange protocol: busy and refused requests", "[gossip][protocol]") {
  Fixture f;
  SECTION("busy: answered BUSY, nothing started") {
    f.request();
    REQUIRE(f.conn->of(Type::Busy).size() == 1);
    CHECK(decode_id(f.conn->of(Type::Busy)[0]).exchange_id == 55);
    CHECK(f.port.counters[ExchangePort::Counter::BusySent] == 1);
    CHECK_FALSE(f.p.in_flight());
  }
  SECTION("another model: refused with its code") {
    f.port.claim_seq = 7;
    f.request(55, kFp + 1);
    REQUIRE(f.conn->of(Type::Refuse).size() == 1);
    CHECK(decode_code(f.conn->of(Type::Refuse)[0]).code == ExchangeCode::Fingerprint);
    CHECK(f.port.counters[ExchangePort::Counter::RefusedSent] == 1);
    CHECK_FALSE(f.p.in_flight());
  }
  SECTION("the initiator told BUSY or REFUSE fails with the old reason tokens") {
    for (const bool refuse : {false, true}) {
      Fixture g;
      const std::uint64_t id = g.asked();
      if (refuse) g.msg(Type::Refuse, encode_code(id, ExchangeCode::Weighting));
      else g.msg(Type::Busy, encode_id(id));
      REQUIRE(g.port.events.size() == 1);
      CHECK_FALSE(g.port.events[0].ok);
      CHECK(g.port.events[0].reason() == (refuse ? "refused:weighting" : "busy"));
      CHECK(g.port.events[0].failure.kind ==
            (refuse ? ExchangeFailure::Refused : ExchangeFailure::Busy));
      if (refuse) CHECK(g.port.events[0].failure.code == ExchangeCode::Weighting);
      CHECK(g.port.releases == std::vector<std::pair<std::uint64_t, bool>>{{1, false}});
      CHECK(g.conn->is_open());  // a clean answer: the connection stays for the next exchange
    }
  }
  SECTION("no live peer: released, no event") {
    f.dir.peers = {{"peer-a", "10.0.0.1:7000"}};
    f.p.start(1, 100);
    CHECK(f.port.releases == std::vector<std::pair<std::uint64_t, bool>>{{1, true}});
    CHECK(f.port.events.empty());
  }
}

TEST_CASE("exchange protocol: malformed and out-of-order messages", "[gossip][protocol]") {
  Fixture f;
  SECTION("a malformed request closes the connection") {
    f.msg(Type::Request, net::Bytes(10, 0));
    CHECK_FALSE(f.conn->is_open());
    CHECK(f.conn->closed_reason.find("malformed request") != std::string::npos);
  }
  SECTION("another wire version is malformed") {
    net::Bytes b = *encode_request({55, kFp, kN, WireFormat::Fp32, false, 10});
    b[0] = kExchangeWireVersion + 1;
    f.msg(Type::Request, b);
    CHECK_FALSE(f.conn->is_open());
  }
  SECTION("an accept nobody asked for") {
    f.msg(Type::Accept, encode_accept({9, 1}));
    CHECK_FALSE(f.conn->is_open());
    CHECK(f.conn->closed_reason.find("unexpected accept") != std::string::npos);
  }
  SECTION("a vote before our payload fails the exchange with Abort(protocol)") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));  // no snapshot yet: nothing sent
    f.msg(Type::Valid, encode_id(id));
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "protocol");
    REQUIRE(f.conn->of(Type::Abort).size() == 1);
    CHECK(decode_code(f.conn->of(Type::Abort)[0]).code == ExchangeCode::Protocol);
    CHECK_FALSE(f.conn->is_open());
    CHECK(f.port.commits.empty());
  }
  SECTION("a chunk that does not fit is invalid:length") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    std::vector<float> v(kN, 1.0f);
    f.msg(Type::Chunk, encode_chunk(id, 4, reinterpret_cast<const std::uint8_t*>(v.data()), 4));
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "invalid:length");
  }
  SECTION("a non-finite value is invalid:non-finite and counts towards a ban") {
    ExchangeConfig cfg = config();
    cfg.robust.ban_after = 1;
    Fixture g(cfg);
    const std::uint64_t id = g.asked();
    g.msg(Type::Accept, encode_accept({id, 300}));
    g.msg(Type::Chunk, partner_chunk(id, std::numeric_limits<float>::quiet_NaN()));
    REQUIRE(g.port.events.size() == 1);
    CHECK(g.port.events[0].reason() == "invalid:non-finite");
    REQUIRE(g.port.bans.size() == 1);
    CHECK(g.port.bans[0].partner == "peer-b");
    CHECK(g.p.banned("peer-b"));
  }
}

TEST_CASE("exchange protocol: an int4 vector of any other size than the wire's is invalid:length",
          "[gossip][protocol]") {
  ExchangeConfig cfg = config();
  cfg.wire = WireFormat::Int4;
  Fixture f(cfg);
  const std::size_t expected = encoded_size(WireFormat::Int4, kN);  // 4 + 2 bytes
  REQUIRE(expected == 6);
  const std::uint64_t id = f.asked();
  CHECK(decode_request(f.conn->of(Type::Request)[0]).wire == WireFormat::Int4);
  f.msg(Type::Accept, encode_accept({id, 300}));
  std::vector<std::uint8_t> v(expected + 1, 0);  // a zero scale, zero codes: finite
  SECTION("one byte too many at once") {
    f.msg(Type::Chunk, encode_chunk(id, 0, v.data(), expected + 1));
  }
  SECTION("one byte too many in a second chunk (an odd size: int4 chunks need no whole values)") {
    f.msg(Type::Chunk, encode_chunk(id, 0, v.data(), 5));
    CHECK(f.port.events.empty());
    f.msg(Type::Chunk, encode_chunk(id, 5, v.data(), 2));
  }
  REQUIRE(f.port.events.size() == 1);
  CHECK(f.port.events[0].reason() == "invalid:length");
  CHECK(f.port.commits.empty());
}

TEST_CASE("exchange protocol: deadlines", "[gossip][protocol]") {
  Fixture f;
  using Timer = ExchangePort::Timer;
  SECTION("no answer: timeout:answer, the connection closed") {
    f.asked();
    CHECK(f.port.armed.at(Timer::Deadline).second == ExchangeConfig{}.answer_timeout);
    f.p.on_timer(Timer::Deadline, 2);  // another exchange's: ignored
    CHECK(f.port.events.empty());
    f.p.on_timer(Timer::Deadline, 1);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "timeout:answer");
    CHECK(f.port.events[0].failure.kind == ExchangeFailure::TimeoutAnswer);  // typed in the event
    CHECK_FALSE(f.conn->is_open());
  }
  SECTION("no dial result: timeout:connect") {
    f.p.start(1, 100);
    f.p.on_timer(Timer::Deadline, 1);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "timeout:connect");
    // A late connection is kept for later exchanges.
    f.p.on_dialled(1, "peer-b", f.conn, {});
    CHECK(f.port.pool_.count("peer-b"));
  }
  SECTION("a stalled transfer: timeout:transfer and Abort(timeout)") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    f.port.t += ExchangeConfig{}.transfer_timeout_floor;  // (its silence reported on the way)
    f.p.on_timer(Timer::Deadline, 1);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "timeout:transfer");
    REQUIRE(f.conn->of(Type::Abort).size() == 1);
    CHECK(decode_code(f.conn->of(Type::Abort)[0]).code == ExchangeCode::Timeout);
  }
  SECTION("the partner declared gone mid-transfer: partner-lost now, not at the deadline") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    f.p.partner_lost("peer-c");  // another peer: nothing happens
    CHECK(f.port.events.empty());
    f.p.partner_lost("peer-b");
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "partner-lost");
    CHECK(f.port.events[0].failure.kind == ExchangeFailure::PartnerLost);
    CHECK_FALSE(f.port.events[0].ok);
    REQUIRE(f.conn->of(Type::Abort).size() == 1);
    CHECK_FALSE(f.conn->is_open());
    CHECK(f.port.commits.empty());
  }
  SECTION("a suspected partner silent mid-transfer: partner-silent after its bound, not at the deadline") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));  // the transfer starts at t = 1000
    // The transfer's own deadline (its floor: 16 bytes add nothing) lies beyond the silence
    // bound, which is armed first.
    const Millis deadline = ExchangeConfig{}.transfer_timeout_floor;
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(1000));
    f.port.t += Millis(200);
    f.p.partner_suspected("peer-c", true);  // another peer: nothing happens
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(1000));
    f.p.partner_suspected("peer-b", true);
    // Silent for 200 ms of its 1 s bound: the deadline comes when the bound is reached.
    CHECK(f.port.events.empty());
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(800));
    // Half its vector arrives 700 ms into the transfer: heard, and its longest gap (700 ms)
    // makes the bound 4 x 700 ms.
    f.port.t += Millis(500);
    std::vector<float> half(kN / 2, 5.0f);
    f.msg(Type::Chunk, encode_chunk(id, 0, reinterpret_cast<const std::uint8_t*>(half.data()),
                                    half.size() * 4));
    f.port.t += Millis(300);  // the early deadline fires: heard 300 ms ago, under 2.8 s
    f.p.on_timer(Timer::Deadline, 1);
    CHECK(f.port.events.empty());
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(2500));
    f.port.t += Millis(2500);
    f.p.on_timer(Timer::Deadline, 1);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "partner-silent");
    CHECK(Millis(200 + 500 + 300 + 2500) < deadline);  // before the transfer's own deadline
    CHECK_FALSE(f.port.events[0].ok);
    REQUIRE(f.conn->of(Type::Abort).size() == 1);
    CHECK(decode_code(f.conn->of(Type::Abort)[0]).code == ExchangeCode::Timeout);
    CHECK_FALSE(f.conn->is_open());
    CHECK(f.port.commits.empty());
  }
  SECTION("a suspicion already silent for its bound ends the transfer at once") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    f.port.t += Millis(1500);
    f.p.partner_suspected("peer-b", true);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "partner-silent");
  }
  SECTION("a partner taken for alive again keeps its transfer until the deadline") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    const Millis deadline = ExchangeConfig{}.transfer_timeout_floor;
    f.port.t += Millis(400);
    f.p.partner_suspected("peer-b", true);
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(600));
    f.port.t += Millis(100);
    f.p.partner_suspected("peer-b", false);
    // Its silence is reported to membership at the bound, then the deadline holds.
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(500));
    f.port.t += Millis(500);
    f.p.on_timer(Timer::Deadline, 1);
    CHECK(f.port.events.empty());
    CHECK(f.port.silent_ == std::vector<std::string>{"peer-b"});
    CHECK(f.port.armed.at(Timer::Deadline).second == deadline - Millis(1000));
    f.port.t += deadline - Millis(1000);
    f.p.on_timer(Timer::Deadline, 1);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "timeout:transfer");
  }
  SECTION("an unsuspected silent partner is reported once; membership's suspicion then ends it") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    const Millis deadline = ExchangeConfig{}.transfer_timeout_floor;
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(1000));  // the silence bound first
    f.port.t += Millis(1000);
    f.p.on_timer(Timer::Deadline, 1);
    CHECK(f.port.events.empty());
    CHECK(f.port.silent_ == std::vector<std::string>{"peer-b"});
    CHECK(f.port.armed.at(Timer::Deadline).second == deadline - Millis(1000));
    f.port.t += Millis(700);  // membership's probe failed: suspect
    f.p.partner_suspected("peer-b", true);
    REQUIRE(f.port.events.size() == 1);
    CHECK(f.port.events[0].reason() == "partner-silent");
    CHECK(f.port.silent_.size() == 1);
  }
  SECTION("a transfer whose messages keep coming is not reported past the floor") {
    const std::uint64_t id = f.asked();
    f.msg(Type::Accept, encode_accept({id, 300}));
    const float v = 5.0f;
    for (std::size_t i = 0; i + 1 < kN; ++i) {  // one value at a time, 900 ms apart: 2.7 s
      f.port.t += Millis(900);
      f.p.on_timer(Timer::Deadline, 1);  // armed at the bound, never reached
      f.msg(Type::Chunk, encode_chunk(id, i * 4, reinterpret_cast<const std::uint8_t*>(&v), 4));
    }
    CHECK(f.port.events.empty());
    CHECK(f.port.silent_.empty());
  }
  SECTION("back-pressure: a retry is armed and resumes the send") {
    const std::uint64_t id = f.asked();
    f.p.snapshot_ready(1, snapshot(1.0f));
    f.conn->refuse_sends = true;
    f.msg(Type::Accept, encode_accept({id, 300}));
    CHECK(f.port.armed.count(Timer::Retry));
    CHECK(f.conn->of(Type::Chunk).empty());
    f.conn->refuse_sends = false;
    f.p.on_timer(Timer::Retry, 1);
    CHECK(f.conn->of(Type::Chunk).size() == 1);
  }
}

TEST_CASE("payload sample: the same vector in other chunks gives the same sample, a moved one another",
          "[gossip][protocol]") {
  std::vector<float> v(1000);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = 0.01f * float(k);
  auto bytes = [](const std::vector<float>& x) { return reinterpret_cast<const std::uint8_t*>(x.data()); };
  const std::size_t size = v.size() * 4;
  const std::uint64_t whole = payload_sample(bytes(v), 0, size);
  // Chunks cut at 64-byte multiples (as the sender's chunks are), in any order.
  CHECK(payload_sample(bytes(v) + 2048, 2048, size - 2048) + payload_sample(bytes(v), 0, 2048) == whole);
  // One averaging or training step moves nearly every value; a sampled one is enough.
  std::vector<float> moved = v;
  moved[16] += 1e-6f;  // byte 64: sampled
  CHECK(payload_sample(bytes(moved), 0, size) != whole);
  std::vector<float> step = v;
  for (float& x : step) x *= 0.999f;
  CHECK(payload_sample(bytes(step), 0, size) != whole);
  // A sample, not a checksum (the AEAD authenticates the bytes): a value between samples is not seen.
  std::vector<float> between = v;
  between[1] += 1.0f;
  CHECK(payload_sample(bytes(between), 0, size) == whole);
}

TEST_CASE("exchange failure tokens are the metrics' strings", "[gossip][protocol]") {
  CHECK(to_string(ExchangeFailure::Busy) == "busy");
  CHECK(to_string(ExchangeFailure::Connect) == "connect");
  CHECK(to_string(ExchangeFailure::Closed) == "closed");
  CHECK(to_string(ExchangeFailure::Protocol) == "protocol");
  CHECK(to_string(ExchangeFailure::TimeoutConnect) == "timeout:connect");
  CHECK(to_string(ExchangeFailure::TimeoutAnswer) == "timeout:answer");
  CHECK(to_string(ExchangeFailure::TimeoutTransfer) == "timeout:transfer");
  CHECK(to_string(ExchangeFailure::PartnerLost) == "partner-lost");
  CHECK(to_string(ExchangeFailure::PartnerSilent) == "partner-silent");
  CHECK(to_string({ExchangeFailure::Refused, ExchangeCode::Fingerprint}) == "refused:fingerprint");
  CHECK(to_string({ExchangeFailure::Refused, ExchangeCode::Banned}) == "refused:banned");
  CHECK(to_string(ExchangeFailure::InvalidNonFinite) == "invalid:non-finite");
  CHECK(to_string(ExchangeFailure::InvalidLength) == "invalid:length");
  CHECK(to_string(ExchangeFailure::InvalidNorm) == "invalid:norm");
  CHECK(to_string(ExchangeFailure::Anomalous) == "anomalous");
  CHECK(to_string({ExchangeFailure::PeerAbort, ExchangeCode::Anomalous}) == "peer-abort:anomalous");
  CHECK(to_string(ExchangeFailure::Backend) == "backend");
}

TEST_CASE("exchange protocol: deadlines fitted to the answers and a silent partner backed off",
          "[gossip][protocol]") {
  using Timer = ExchangePort::Timer;
  ExchangeConfig cfg = config();
  cfg.max_tries = 3;
  Fixture f(cfg);
  f.dir.peers.push_back({"peer-c", "10.0.0.3:7000"});
  std::map<std::string, std::shared_ptr<FakeConnection>> conns = {
      {"peer-b", f.conn}, {"peer-c", std::make_shared<FakeConnection>("peer-c")}};
  // Exchange 1: the first partner X is dialled and asked with the configured deadlines (nothing
  // measured yet); it answers BUSY after 20 ms. The second, Y, gets the fitted dial deadline
  // (twice the 1 s floor) and stays silent: timeout:connect.
  f.p.start(1, 100);
  REQUIRE(f.port.dials.size() == 1);
  const std::string x = f.port.dials[0].second, y = x == "peer-b" ? "peer-c" : "peer-b";
  CHECK(f.port.armed.at(Timer::Deadline).second == cfg.answer_timeout);
  f.p.on_dialled(1, x, conns[x], {});
  REQUIRE(conns[x]->of(Type::Request).size() == 1);
  CHECK(f.port.armed.at(Timer::Deadline).second == cfg.answer_timeout);
  f.port.t += Millis(20);
  f.p.on_message(conns[x], static_cast<std::uint8_t>(Type::Busy),
                 net::Bytes(*encode_id(decode_request(conns[x]->of(Type::Request)[0]).exchange_id)));
  REQUIRE(f.port.dials.size() == 2);
  CHECK(f.port.dials[1].second == y);
  CHECK(f.port.armed.at(Timer::Deadline).second == Millis(2000));
  f.port.t += Millis(2000);
  f.p.on_timer(Timer::Deadline, 1);
  REQUIRE(f.port.events.size() == 1);
  CHECK(f.port.events[0].reason() == "timeout:connect");
  // Exchanges 2 to 11, within Y's 2 s backoff: X is asked first every time (on its pooled
  // connection, with the fitted 1 s answer deadline); Y only once X said BUSY.
  for (std::uint64_t seq = 2; seq <= 11; ++seq) {
    f.port.t += Millis(100);
    const std::size_t asked = conns[x]->of(Type::Request).size();
    f.p.start(seq, 100);
    REQUIRE(conns[x]->of(Type::Request).size() == asked + 1);
    CHECK(f.port.armed.at(Timer::Deadline).second == Millis(1000));
    f.p.on_message(conns[x], static_cast<std::uint8_t>(Type::Busy),
                   net::Bytes(*encode_id(decode_request(conns[x]->of(Type::Request).back()).exchange_id)));
    REQUIRE(f.port.dials.back().second == y);  // nobody else left to ask
    f.p.on_dialled(seq, y, nullptr, {net::CloseReason::Unspecified, "connect failed"});
    REQUIRE(!f.p.in_flight());
  }
}

TEST_CASE("exchange protocol: the partner schedule answers a requester ahead BUSY, and a partner "
          "ahead costs one round, not a jump to its count",
          "[gossip][protocol]") {
  ExchangeConfig cfg = config();
  cfg.choice.mode = PartnerMode::Hypercube;
  SECTION("a requester any number of rounds ahead: BUSY, our count stays") {
    Fixture f(cfg);  // the list {peer-a, peer-b}: one round, the two paired
    f.port.claim_seq = 7;
    f.port.standing = snapshot(1.0f);
    RequestMsg m{55, kFp, kN, WireFormat::Fp32, false, 10};
    m.round = 5;
    m.view = make_view({"peer-b"}, "peer-a").hash;
    f.msg(Type::Request, encode_request(m));
    CHECK(f.conn->of(Type::Busy).size() == 1);  // before: it jumped to round 5 and served it
    CHECK(f.conn->of(Type::Accept).empty());
  }
  SECTION("a partner two rounds ahead: our next round is the one after, not its") {
    Fixture f(cfg);
    // 8 members: peer-a is rank 0, its partners peer-b, peer-c, peer-e in rounds 0, 1, 2.
    for (char c = 'c'; c <= 'h'; ++c)
      f.dir.peers.push_back({std::string("peer-") + c, std::string("10.0.0.") + c + ":7000"});
    const std::uint64_t id = f.asked();  // peer-b, round 0
    CHECK(decode_request(f.conn->of(Type::Request)[0]).round == 0);
    f.p.snapshot_ready(1, snapshot(1.0f));
    AcceptMsg a{id, 300, 0.625, 9000};
    a.round = 2;  // it skipped its round with us
    f.msg(Type::Accept, encode_accept(a));
    f.msg(Type::Chunk, partner_chunk(id));
    f.msg(Type::Valid, encode_id(id));
    REQUIRE(f.port.commits.size() == 1);
    CHECK(f.port.commits[0].second.w == 0.5f);  // plain
    f.p.applied(1);
    f.p.start(2, 100);
    REQUIRE(f.port.dials.size() == 2);
    CHECK(f.port.dials[1].second == "peer-c");  // round 1; a jump to 2 would ask peer-e
  }
}

TEST_CASE("exchange protocol: a scheduled partner that answers BUSY restarts the round's wait, at "
          "most kMaxWaitRestarts times, then the round is skipped",
          "[gossip][protocol]") {
  ExchangeConfig cfg = config();
  cfg.choice.mode = PartnerMode::Hypercube;
  cfg.choice.schedule_wait_ms = 5000;  // over 4 x the 1 s between our starts, so it is the wait
  Fixture f(cfg);                      // the list {peer-a, peer-b}: one round, the two paired
  f.port.t = Millis(0);
  // One exchange a second, each answered BUSY by peer-b 100 ms later: the round (0) of the
  // request that each start sends, or -1 once the round was skipped for a drawn partner.
  std::vector<std::int64_t> rounds;
  std::size_t requests = 0;
  for (std::uint64_t seq = 1; seq <= 30; ++seq) {
    f.port.t = Millis(std::int64_t(seq - 1) * 1000);
    const std::size_t dials = f.port.dials.size();
    f.p.start(seq, 100);
    if (f.port.dials.size() > dials) f.p.on_dialled(seq, "peer-b", f.conn, {});
    const auto reqs = f.conn->of(Type::Request);
    REQUIRE(reqs.size() == requests + 1);
    requests = reqs.size();
    const RequestMsg m = decode_request(reqs.back());
    rounds.push_back(m.round);
    if (m.round < 0) break;
    f.port.t += Millis(100);
    f.msg(Type::Busy, encode_id(m.exchange_id));
  }
  // Without restarts the round would be skipped at the first start past 5 s (the 7th). Each
  // BUSY restarts the wait (16 of them: the last at 15.1 s), so round 0 is asked until 20.1 s and
  // the start at 21 s goes to a drawn partner.
  std::string asked;
  for (auto r : rounds) asked += std::to_string(r) + " ";
  INFO("rounds asked: " << asked);
  REQUIRE(rounds.size() == 22);
  for (std::size_t i = 0; i + 1 < rounds.size(); ++i) CHECK(rounds[i] == 0);
  CHECK(rounds.back() == -1);
}
