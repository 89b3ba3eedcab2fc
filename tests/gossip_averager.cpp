// Unit tests of the averaging exchange on the in-memory network: the midpoint, sample weights,
// BUSY, all-or-nothing under failures, refusal of bad payloads and mismatched peers, lossy wires.
#include <catch2/catch.hpp>

#include <map>

#include "tests/gossip_averager_harness.hpp"

using namespace gossiptrain;
using namespace gossiptrain::gossip;
using namespace gossiptrain::gossip::avgtest;

namespace {

bool has_event(SimPeer& p) { return !p.events.empty(); }

// B's training loop stalls. C's first exchange with B is served from B's standing snapshot (no
// step boundary of B needed); C's second one finds none left, so B stays in that exchange waiting
// for a snapshot, busy. Every peer must hold a standing snapshot already (serve_all).
void stall_in_exchange(Cluster& c, SimPeer& b, SimPeer& cc) {
  b.paused = true;
  cc.dir.peers = {{b.id, b.addr}};
  cc.step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(cc); }, Millis(100)));
  CHECK(cc.events[0].ok);
  cc.step_hook(c.be);
  REQUIRE(c.run_until([&] { return b.avg->stats().busy_sent == 0 && b.avg->in_exchange() &&
                                   cc.avg->in_exchange(); }, Millis(100)));
}

// A hand-driven peer speaking raw exchange messages, to send what a correct averager never would.
class RawPeer final : public net::TransportHandler {
 public:
  RawPeer(net::SimNetwork& net, const std::string& addr, const std::string& id)
      : t_(net.add_node(addr, id)) {
    t_.set_handler(this);
  }
  void dial(const std::string& addr) {
    t_.connect(addr, [this](net::ConnectionPtr c, const net::CloseCause&) { conn = c; });
  }
  void send(ExchangeType type, net::SharedBytes b) {
    REQUIRE(conn);
    conn->send(static_cast<std::uint8_t>(type), std::move(b));
  }
  void send_raw(std::uint8_t type, net::Bytes b) {
    REQUIRE(conn);
    conn->send(type, std::make_shared<net::Bytes>(std::move(b)));
  }
  bool got(ExchangeType type) const {
    for (auto& [ty, b] : msgs)
      if (ty == static_cast<std::uint8_t>(type)) return true;
    return false;
  }
  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr&, std::uint8_t type, net::Bytes&& b) override {
    msgs.emplace_back(type, std::move(b));
  }
  void on_closed(const net::ConnectionPtr&, const net::CloseCause& reason) override {
    closed = true;
    closed_reason = reason.text();
  }

  net::ConnectionPtr conn;
  std::vector<std::pair<std::uint8_t, net::Bytes>> msgs;
  bool closed = false;
  std::string closed_reason;

 private:
  net::SimTransport& t_;
};

std::vector<float> diff(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}
float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float f : v) m = std::max(m, std::abs(f));
  return m;
}

}  // namespace

TEST_CASE("exchange messages round-trip and malformed ones are rejected", "[gossip]") {
  using base::DecodeError;
  RequestMsg r{0x1122334455667788ull, 42, 1000, WireFormat::Int8, true, 600, 0.375};
  auto b = encode_request(r);
  REQUIRE(b->size() == kRequestBytes);
  CHECK((*b)[0] == kExchangeWireVersion);
  const RequestMsg p = decode_request(*b);
  CHECK(p.exchange_id == r.exchange_id);
  CHECK(p.fingerprint == 42);
  CHECK(p.n_params == 1000);
  CHECK(p.wire == WireFormat::Int8);
  CHECK(p.weighted);
  CHECK(p.samples == 600);
  CHECK(p.progress == 0.375);
  CHECK(decode_request(*encode_request(RequestMsg{})).progress == -1.0);  // not known
  net::Bytes bad = *b;
  bad.push_back(0);
  CHECK_THROWS_AS(decode_request(bad), DecodeError);  // wrong size
  bad = *b;
  bad[0] = kExchangeWireVersion + 1;
  CHECK_THROWS_AS(decode_request(bad), DecodeError);  // another wire version
  bad = *b;
  bad[25] = 9;
  CHECK_THROWS_AS(decode_request(bad), DecodeError);  // unknown wire
  bad = *b;
  bad[26] = 2;
  CHECK_THROWS_AS(decode_request(bad), DecodeError);  // not a bool
  bad = *b;
  bad[34] = 0x80;
  CHECK_THROWS_AS(decode_request(bad), DecodeError);  // negative sample count
  for (double p : {1.5, -0.5, std::nan("")}) {
    bad = *b;
    base::put_f64(bad.data() + 35, p);
    CHECK_THROWS_AS(decode_request(bad), DecodeError);  // progress outside {-1} and [0, 1]
  }
  CHECK_THROWS_AS(decode_request(net::Bytes{}), DecodeError);

  const AcceptMsg acc = decode_accept(*encode_accept({5, 77, 1.0}));
  CHECK(acc.exchange_id == 5);
  CHECK(acc.samples == 77);
  CHECK(acc.progress == 1.0);
  bad = *encode_accept({5, 77, 1.0});
  base::put_f64(bad.data() + 17, 2.0);
  CHECK_THROWS_AS(decode_accept(bad), DecodeError);
  const ValidMsg plain = decode_valid(*encode_valid({6, 0.0, 0.0}));
  CHECK(plain.exchange_id == 6);
  CHECK(plain.tau == 0.0);
  const ValidMsg clip = decode_valid(*encode_valid({6, 2.5, 1.5}));
  CHECK(clip.tau == 2.5);
  CHECK(clip.norm == 1.5);
  bad = *encode_valid({6, 2.5, 1.5});
  bad.pop_back();
  CHECK_THROWS_AS(decode_valid(bad), DecodeError);

  const CodeMsg code = decode_code(*encode_code(7, ExchangeCode::Invalid));
  CHECK(code.exchange_id == 7);
  CHECK(code.code == ExchangeCode::Invalid);
  CHECK_THROWS_AS(decode_code(net::Bytes{kExchangeWireVersion, 0, 0, 0, 0, 0, 0, 0, 0, 7}),
                  DecodeError);  // retired value
  CHECK_THROWS_AS(decode_code(net::Bytes{kExchangeWireVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
                  DecodeError);  // code 0 is not one
  CHECK_THROWS_AS(decode_id(net::Bytes(8, 0)), DecodeError);
  CHECK(decode_id(*encode_id(11)).exchange_id == 11);

  const std::uint8_t data[5] = {1, 2, 3, 4, 5};
  auto ch = encode_chunk(9, 128, data, 5);
  const ChunkView v = decode_chunk(*ch);
  CHECK(v.exchange_id == 9);
  CHECK(v.offset == 128);
  CHECK(v.size == 5);
  CHECK((*ch)[0] == kExchangeWireVersion);
  CHECK((*ch)[kChunkHeaderBytes + 4] == 5);
  CHECK(kChunkHeaderBytes % 8 == 0);  // the data stays 8-byte aligned
  CHECK_THROWS_AS(decode_chunk(net::Bytes(kChunkHeaderBytes, 0)), DecodeError);  // without data
  bad = *ch;
  bad[0] = 0;
  CHECK_THROWS_AS(decode_chunk(bad), DecodeError);  // another wire version
  bad = *ch;
  bad[3] = 1;
  CHECK_THROWS_AS(decode_chunk(bad), DecodeError);  // reserved bytes not zero
}

TEST_CASE("two peers meet at the midpoint and both report the exchange", "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.direct = GENERATE(true, false);  // mixing from the chunks (cpu, fp32), or the copy path
  cfg.chunk_bytes = 1000;               // several chunks each way
  INFO("direct " << cfg.direct);
  Cluster c(2, 1000, cfg, 1);
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(1000)));
  const auto y0 = c[0].values(c.be), y1 = c[1].values(c.be);
  for (std::size_t i = 0; i < x0.size(); ++i) {
    const float mid = 0.5f * (x0[i] + x1[i]);
    REQUIRE(y0[i] == Approx(mid).margin(1e-6));
    REQUIRE(y1[i] == Approx(mid).margin(1e-6));
  }
  const ExchangeEvent& a = c[0].events.at(0);
  const ExchangeEvent& b = c[1].events.at(0);
  CHECK(a.ok);
  CHECK(b.ok);
  CHECK(a.reason().empty());
  CHECK(a.role == ExchangeRole::Initiator);
  CHECK(b.role == ExchangeRole::Responder);
  CHECK(a.partner == c[1].id);
  CHECK(b.partner == c[0].id);
  CHECK(a.exchange_id == b.exchange_id);
  CHECK(a.w == 0.5f);
  CHECK(b.w == 0.5f);
  CHECK(a.bytes_sent >= 4000);  // 1000 fp32 values plus chunk headers
  CHECK(a.bytes_sent == b.bytes_received);
  CHECK(b.bytes_sent == a.bytes_received);
  CHECK(a.ms > 0);
  CHECK(c[0].avg->stats().ok == 1);
  CHECK(c[1].avg->stats().ok == 1);
  CHECK_FALSE(c[0].avg->in_exchange());
  CHECK_FALSE(c[1].avg->in_exchange());

  // A second exchange reuses the initiator's dedicated connection.
  const auto before = c.net.stats().connects_ok;
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return c[0].events.size() == 2 && c[1].events.size() == 2; },
                      Millis(1000)));
  CHECK(c[0].events[1].ok);
  CHECK(c.net.stats().connects_ok == before);
}

TEST_CASE("fp16 and bf16 mixed straight from the chunks match the copy path bit for bit",
          "[gossip]") {
  // 40000 values: with 1 MiB chunks one span of 3 decoded blocks; with 1000-byte chunks many spans.
  AveragerConfig cfg = base_config();
  cfg.wire = GENERATE(WireFormat::Fp16, WireFormat::Bf16);
  cfg.chunk_bytes = GENERATE(std::size_t(1000), AveragerConfig{}.chunk_bytes);
  INFO("wire " << wire_name(cfg.wire) << ", chunk bytes " << cfg.chunk_bytes);
  std::vector<std::vector<float>> result[2];
  for (int direct = 0; direct < 2; ++direct) {
    cfg.direct = direct == 1;
    Cluster c(2, 40000, cfg, 9);
    const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
    c[0].step_hook(c.be);
    REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(1000)));
    REQUIRE(c[0].events[0].ok);
    REQUIRE(c[1].events[0].ok);
    result[direct] = c.all_values();
    for (std::size_t i = 0; i < x0.size(); ++i) {
      // Near the midpoint (within the encoding's rounding), with the sum conserved.
      REQUIRE(result[direct][0][i] == Approx(0.5f * (x0[i] + x1[i])).margin(0.02));
      REQUIRE(result[direct][0][i] + result[direct][1][i] == Approx(x0[i] + x1[i]).margin(1e-5));
    }
  }
  CHECK(result[0] == result[1]);
}

TEST_CASE("a send rate cap spreads the transfer and changes nothing else", "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.chunk_bytes = 1000;  // 4000-byte vectors: four chunks of 1024 bytes with their headers
  cfg.min_rate_bytes_per_s = 1000;
  const bool capped = GENERATE(true, false);
  if (capped) cfg.max_rate_bytes_per_s = 2000;
  INFO("capped " << capped);
  Cluster c(2, 1000, cfg, 5);
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(10000)));
  for (int i = 0; i < 2; ++i) {
    REQUIRE(c[i].events[0].ok);
    // The last chunk may leave 3 x 1024 / 2000 s = 1.536 s after the first one.
    if (capped) CHECK((c[i].events[0].ms >= 1536 && c[i].events[0].ms < 2500));
    else CHECK(c[i].events[0].ms < 100);
  }
  const auto y0 = c[0].values(c.be), y1 = c[1].values(c.be);
  for (std::size_t i = 0; i < x0.size(); ++i) {
    REQUIRE(y0[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
    REQUIRE(y1[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
  }
  CHECK_THROWS_AS(c[0].avg->set_max_rate(999), std::invalid_argument);  // under the floor
  CHECK_THROWS_AS(c[0].avg->set_max_rate(-1), std::invalid_argument);
  CHECK_NOTHROW(c[0].avg->set_max_rate(0));
}

TEST_CASE("sample weighting mixes with w = n_other / (n_self + n_other)", "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.weight_by_samples = true;
  Cluster c(2, 500, cfg, 2);
  c[0].shard = 100;
  c[1].shard = 300;
  c.serve_all();  // both know their shard sizes before the request
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(1000)));
  REQUIRE(c[0].events[0].ok);
  REQUIRE(c[1].events[0].ok);
  CHECK(c[0].events[0].w == Approx(0.75));
  CHECK(c[1].events[0].w == Approx(0.25));
  const auto y0 = c[0].values(c.be), y1 = c[1].values(c.be);
  for (std::size_t i = 0; i < x0.size(); ++i) {
    REQUIRE(y0[i] == Approx(x0[i] + 0.75f * (x1[i] - x0[i])).margin(1e-6));
    REQUIRE(y1[i] == Approx(x1[i] + 0.25f * (x0[i] - x1[i])).margin(1e-6));
    // The sample-weighted sum is what weighted averaging conserves.
    REQUIRE(100 * y0[i] + 300 * y1[i] == Approx(100 * x0[i] + 300 * x1[i]).margin(1e-3));
  }

  SECTION("a peer with the other weighting mode is refused") {
    AveragerConfig plain = base_config();
    Cluster d(2, 500, plain, 3);
    // Rebuild peer 1 of d with weighting on: same fingerprint and size, other mode.
    d[1].avg = std::make_unique<Averager>(cfg, *d[1].t, d[1].dir, d.be);
    d[1].t->set_handler(d[1].avg.get());
    d.serve_all();
    const auto z0 = d[0].values(d.be);
    d[0].step_hook(d.be);
    REQUIRE(d.run_until([&] { return has_event(d[0]); }, Millis(1000)));
    CHECK_FALSE(d[0].events[0].ok);
    CHECK(d[0].events[0].reason() == "refused:weighting");
    CHECK(d[0].values(d.be) == z0);
  }
}

TEST_CASE("a busy peer answers BUSY and the initiator asks another one", "[gossip]") {
  Cluster c(4, 300, base_config(), 4);
  SimPeer &a = c[0], &b = c[1], &cc = c[2], &d = c[3];
  c.serve_all();  // every peer knows its size and holds a standing snapshot
  const auto s0 = Cluster::coordinate_sums(c.all_values());
  stall_in_exchange(c, b, cc);
  const auto xa = a.values(c.be);

  SECTION("the only candidate is busy: the exchange fails with 'busy' and changes nothing") {
    a.dir.peers = {{b.id, b.addr}};
    a.step_hook(c.be);
    REQUIRE(c.run_until([&] { return has_event(a); }, Millis(1000)));
    CHECK_FALSE(a.events[0].ok);
    CHECK(a.events[0].reason() == "busy");
    CHECK(b.avg->stats().busy_sent == 1);
    CHECK(a.values(c.be) == xa);
    CHECK_FALSE(a.avg->in_exchange());
  }
  SECTION("another peer is asked after BUSY") {
    a.dir.peers = {{b.id, b.addr}, {d.id, d.addr}};
    // The choice is random: repeat until A has met B's BUSY at least once.
    for (int i = 0; i < 20 && b.avg->stats().busy_sent == 0; ++i) {
      const std::size_t k = a.events.size();
      a.step_hook(c.be);
      REQUIRE(c.run_until([&] { return a.events.size() > k; }, Millis(1000)));
      CHECK(a.events.back().ok);
      CHECK(a.events.back().partner == d.id);
    }
    CHECK(b.avg->stats().busy_sent >= 1);
    CHECK(a.avg->stats().failed == 0);
  }
  // B's loop resumes: its first boundary applies the pending mix of the first exchange, then
  // takes the snapshot of the second, which completes.
  b.paused = false;
  REQUIRE(c.run_until([&] { return c.none_in_exchange() && cc.events.size() == 2; }, Millis(1000)));
  CHECK(cc.events[1].ok);
  CHECK(cc.events[1].partner == b.id);
  // Every exchange was pairwise and all or nothing: the sum over the peers is what it was.
  const auto s1 = Cluster::coordinate_sums(c.all_values());
  for (std::size_t j = 0; j < s0.size(); ++j) REQUIRE(s1[j] == Approx(s0[j]).margin(1e-4));
}

TEST_CASE("two peers asking each other at once still exchange (crossing requests)", "[gossip]") {
  Cluster c(2, 300, base_config(), 5);
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  // Both take a step in lockstep and both want to start: one of them must yield.
  c[0].step_hook(c.be);
  c[1].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(1000)));
  CHECK(c[0].events[0].ok);
  CHECK(c[1].events[0].ok);
  CHECK(c[0].events[0].role != c[1].events[0].role);
  const auto y0 = c[0].values(c.be);
  for (std::size_t i = 0; i < x0.size(); ++i)
    REQUIRE(y0[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
}

TEST_CASE("a partner lost mid-exchange: all or nothing on each side", "[gossip]") {
  // The loss hits at every virtual millisecond of an exchange in turn (a partition, or a crash
  // with a connection reset). Each side must end either untouched with a failed event, or at the
  // midpoint with an ok event; and a loss before the commit votes cross leaves BOTH untouched.
  const bool crash = GENERATE(false, true);
  int both_failed_mid_transfer = 0, both_ok = 0, split = 0;
  for (int at = 1; at <= 40; ++at) {
    Cluster c(2, 2000, base_config(), 10 + at);
    const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
    c[0].step_hook(c.be);
    c.run_until([] { return false; }, Millis(at));
    if (crash) c.net.kill(c[1].addr, /*reset=*/true);
    else c.net.partition({{c[0].addr}, {c[1].addr}});
    REQUIRE(c.run_until([&] { return has_event(c[0]); }, Millis(10000)));
    // A partitioned B may not have heard the request at all; if it did, it ends by its deadline.
    REQUIRE(c.run_until([&] { return crash || !c[1].avg->in_exchange(); }, Millis(10000)));
    if (!crash && c[1].events.empty()) {
      CHECK(c[1].values(c.be) == x1);
      CHECK(c[0].events[0].bytes_received == 0);
    }
    auto check_side = [&](SimPeer& p, const std::vector<float>& x) {
      const auto y = p.values(c.be);
      if (p.events.at(0).ok) {
        for (std::size_t i = 0; i < x.size(); ++i)
          REQUIRE(y[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
      } else {
        REQUIRE(y == x);  // bit for bit untouched
        CHECK(p.events[0].w == 0.0f);
      }
      return p.events[0].ok;
    };
    const bool ok0 = check_side(c[0], x0);
    if (crash) {
      // The dead side's memory still shows whether it applied anything before it died.
      const auto y1 = c[1].values(c.be);
      const bool applied1 = y1 != x1;
      if (!ok0 && !applied1 && c[0].events[0].bytes_received > 0) ++both_failed_mid_transfer;
      if (ok0 && applied1) ++both_ok;
      if (ok0 != applied1) ++split;
      // Before the connection is up the dial fails; after, the reset closes it.
      if (!ok0)
        CHECK((c[0].events[0].reason() == "closed" || c[0].events[0].reason() == "connect"));
    } else if (!c[1].events.empty()) {
      const bool ok1 = check_side(c[1], x1);
      if (!ok0 && !ok1 && c[0].events[0].bytes_received + c[1].events[0].bytes_received > 0)
        ++both_failed_mid_transfer;
      if (ok0 && ok1) ++both_ok;
      if (ok0 != ok1) ++split;
      if (!ok0) CHECK(c[0].events[0].reason().rfind("timeout", 0) == 0);
    }
  }
  INFO("crash=" << crash << " both failed mid-transfer " << both_failed_mid_transfer
                << ", both ok " << both_ok << ", split " << split);
  std::printf("loss mid-exchange (%s, 40 instants): both failed mid-transfer %d, both ok %d, "
              "split %d\n", crash ? "crash+reset" : "partition", both_failed_mid_transfer, both_ok,
              split);
  // Losses early in the transfer must have produced clean double failures, late ones clean
  // successes. A split (one side applied, the other not) is the two-generals window no commit
  // protocol closes: the loss falls after one VALID vote was sent and before the other was. Here
  // the votes go out at most two one-way latencies (2 x 5 ms) apart, so at most 10 of the 40
  // 1-ms loss instants can split.
  CHECK(both_failed_mid_transfer >= 3);
  CHECK(both_ok >= 3);
  CHECK(split <= 10);
}

TEST_CASE("bad payloads and bad requests are refused and change nothing", "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.max_diff_norm = 100.0;
  cfg.direct = GENERATE(true, false);
  INFO("direct " << cfg.direct);
  constexpr std::size_t kN = 1000;
  Cluster c(1, kN, cfg, 20);
  SimPeer& a = c[0];
  RawPeer f(c.net, "10.0.9.9:7000", "raw-peer");
  const auto xa = a.values(c.be);
  c.serve_all();  // a knows its size
  f.dial(a.addr);
  REQUIRE(c.run_until([&] { return f.conn != nullptr; }, Millis(100)));

  const std::uint64_t id = 77;
  auto request = [&](std::uint64_t fingerprint, std::uint64_t n) {
    f.send(ExchangeType::Request,
           encode_request({id, fingerprint, n, WireFormat::Fp32, false, 10}));
  };
  auto accepted = [&] {
    request(cfg.fingerprint, kN);
    REQUIRE(c.run_until([&] { return f.got(ExchangeType::Accept); }, Millis(100)));
  };
  // A payload of kN floats (fp32 wire: the raw bytes) sent in two chunks.
  auto send_payload = [&](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    const std::size_t half = v.size() * 2;
    f.send(ExchangeType::Chunk, encode_chunk(id, 0, p, half));
    f.send(ExchangeType::Chunk, encode_chunk(id, half, p + half, v.size() * 4 - half));
  };
  auto expect_failure = [&](const std::string& reason) {
    REQUIRE(c.run_until([&] { return has_event(a); }, Millis(5000)));
    CHECK_FALSE(a.events[0].ok);
    CHECK(a.events[0].reason() == reason);
    CHECK(a.events[0].role == ExchangeRole::Responder);
    c.run_until([] { return false; }, Millis(50));  // more step boundaries: still nothing applied
    CHECK(a.values(c.be) == xa);
    CHECK_FALSE(a.avg->in_exchange());
    CHECK(f.closed);
  };

  SECTION("a chunk of another exchange in the middle of the transfer") {
    accepted();
    std::vector<float> v(kN, 1.0f);
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    f.send(ExchangeType::Chunk, encode_chunk(id, 0, p, 400));
    f.send(ExchangeType::Chunk, encode_chunk(id + 1, 400, p + 400, 400));
    expect_failure("protocol");
    CHECK(f.got(ExchangeType::Abort));
  }
  SECTION("more bytes than the declared vector") {
    accepted();
    std::vector<float> v(kN + 1, 1.0f);
    f.send(ExchangeType::Chunk,
           encode_chunk(id, 0, reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * 4));
    expect_failure("invalid:length");
  }
  SECTION("an fp32 chunk that ends inside a value") {
    accepted();
    std::vector<float> v(kN, 1.0f);
    f.send(ExchangeType::Chunk, encode_chunk(id, 0, reinterpret_cast<const std::uint8_t*>(v.data()), 402));
    expect_failure("invalid:length");
  }
  SECTION("a chunk out of order") {
    accepted();
    std::vector<float> v(kN, 1.0f);
    f.send(ExchangeType::Chunk, encode_chunk(id, 8, reinterpret_cast<const std::uint8_t*>(v.data()), 8));
    expect_failure("invalid:length");
  }
  SECTION("a NaN in the vector") {
    accepted();
    std::vector<float> v(xa);
    v[123] = std::nanf("");
    send_payload(v);
    expect_failure("invalid:non-finite");
    CHECK(f.got(ExchangeType::Abort));
  }
  SECTION("an infinity in the vector") {
    accepted();
    std::vector<float> v(xa);
    v[999] = -INFINITY;
    send_payload(v);
    expect_failure("invalid:non-finite");
  }
  SECTION("a vector farther than the norm bound") {
    accepted();
    std::vector<float> v(xa);
    for (auto& f32 : v) f32 += 10.0f;  // ||r - s|| = 10 * sqrt(1000) > 100
    send_payload(v);
    expect_failure("invalid:norm");
  }
  SECTION("a VALID for another exchange") {
    accepted();
    f.send(ExchangeType::Valid, encode_id(id + 1));
    expect_failure("protocol");
  }
  SECTION("an ACCEPT sent to the responder") {
    accepted();
    f.send(ExchangeType::Accept, encode_accept({id, 10}));
    expect_failure("protocol");
  }
  SECTION("the initiator goes silent after ACCEPT") {
    accepted();
    expect_failure("timeout:transfer");
  }
  SECTION("a fingerprint mismatch is refused before anything is sent") {
    request(cfg.fingerprint + 1, kN);
    REQUIRE(c.run_until([&] { return f.got(ExchangeType::Refuse); }, Millis(100)));
    CHECK_FALSE(f.got(ExchangeType::Accept));
    CHECK(a.avg->stats().refused_sent == 1);
    CHECK_FALSE(a.avg->in_exchange());
    CHECK(a.events.empty());
  }
  SECTION("a wrong vector length is refused before anything is sent") {
    request(cfg.fingerprint, kN + 1);
    REQUIRE(c.run_until([&] { return f.got(ExchangeType::Refuse); }, Millis(100)));
    CHECK(decode_code(f.msgs.back().second).code == ExchangeCode::Size);
    CHECK_FALSE(a.avg->in_exchange());
  }
  SECTION("a malformed request closes the connection") {
    f.send_raw(static_cast<std::uint8_t>(ExchangeType::Request), net::Bytes(10, 0));
    REQUIRE(c.run_until([&] { return f.closed; }, Millis(100)));
    CHECK_FALSE(a.avg->in_exchange());
  }
  SECTION("an unknown exchange message type closes the connection") {
    f.send_raw(0x5E, net::Bytes(3, 0));
    REQUIRE(c.run_until([&] { return f.closed; }, Millis(100)));
  }
  SECTION("a chunk outside any exchange closes the connection") {
    std::vector<float> v(4, 1.0f);
    f.send(ExchangeType::Chunk, encode_chunk(5, 0, reinterpret_cast<const std::uint8_t*>(v.data()), 16));
    REQUIRE(c.run_until([&] { return f.closed; }, Millis(100)));
    CHECK(a.events.empty());
  }
  // Whatever happened, a well-behaved exchange still works afterwards.
  CHECK(a.values(c.be) == xa);
}

TEST_CASE("a fingerprint mismatch between two averagers changes nothing", "[gossip]") {
  Cluster c(2, 400, base_config(), 30);
  AveragerConfig other = base_config();
  other.fingerprint = 0x1234;
  c[1].avg = std::make_unique<Averager>(other, *c[1].t, c[1].dir, c.be);
  c[1].t->set_handler(c[1].avg.get());
  c.serve_all();
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]); }, Millis(1000)));
  CHECK_FALSE(c[0].events[0].ok);
  CHECK(c[0].events[0].reason() == "refused:fingerprint");
  CHECK(c[1].avg->stats().refused_sent == 1);
  c.run_until([] { return false; }, Millis(50));
  CHECK(c[0].values(c.be) == x0);
  CHECK(c[1].values(c.be) == x1);
}

TEST_CASE("a lone peer starts no exchange and reports none", "[gossip]") {
  Cluster c(1, 100, base_config(), 40);
  const auto x = c[0].values(c.be);
  for (int i = 0; i < 5; ++i) {
    c[0].step_hook(c.be);
    c.run_until([] { return false; }, Millis(2));
  }
  CHECK(c[0].avg->stats().no_peer == 5);
  CHECK(c[0].events.empty());
  CHECK(c[0].values(c.be) == x);
}

namespace {
// What train_then_settle did to the cluster's values: the mean squared spread against the
// start's, the worst drift of a coordinate's sum, and the exchanges that succeeded.
struct Spread {
  double ratio = 0, drift = 0;
  std::size_t exchanges = 0;
};
Spread settle(Cluster& c, Millis limit) {
  const auto v0 = c.all_values();
  const auto sum0 = Cluster::coordinate_sums(v0);
  c.train_then_settle(limit, 20, 3);
  const auto v = c.all_values();
  Spread r;
  r.ratio = Cluster::msd(v) / Cluster::msd(v0);
  const auto s = Cluster::coordinate_sums(v);
  for (std::size_t j = 0; j < s.size(); ++j) r.drift = std::max(r.drift, std::abs(s[j] - sum0[j]));
  for (auto& p : c.peers) r.exchanges += p->avg->stats().ok;
  r.exchanges /= 2;  // each counted by both sides
  return r;
}
}  // namespace

TEST_CASE("lossy wire encodings also reach consensus", "[gossip]") {
  // 8 peers stepping every 20 virtual ms, averaging whenever free. The lossy encodings add a
  // rounding error per exchange that does not shrink with the spread, so consensus stops at a floor
  // of about that error squared instead of going to zero as with fp32. With |x| ~ 0.35 at
  // consensus (the mean of 8 N(0,1)) and msd_0 ~ 1: fp16 (2^-11 relative) ~ 1e-8, bf16 (2^-8) ~ 1e-6,
  // int8 (step max|x|/127 ~ 1/127 per block, variance step^2/12) ~ 5e-6; bounds are 10x above.
  // int4 and int2 the same with steps 127/7 and 127 times coarser: ~1.9e-3 and ~0.09 (measured
  // 1.8e-3 and 9.3e-2); bounds 10x and 5x above.
  // The sum is conserved all the same (to float rounding): each side subtracts exactly what it
  // sent, decoded, so what one side gains the other loses.
  struct Case {
    WireFormat wire;
    double max_ratio;      // msd_end / msd_0
    double max_sum_drift;  // per coordinate, over 8 peers with |x| ~ 1
  };
  const Case k = GENERATE(Case{WireFormat::Fp32, 1e-12, 1e-4}, Case{WireFormat::Fp16, 1e-7, 1e-4},
                          Case{WireFormat::Bf16, 1e-5, 1e-4}, Case{WireFormat::Int8, 1e-4, 1e-4},
                          Case{WireFormat::Int4, 2e-2, 1e-4}, Case{WireFormat::Int2, 0.5, 1e-4});
  AveragerConfig cfg = base_config();
  cfg.wire = k.wire;
  cfg.direct = GENERATE(true, false);  // int8 always takes the copy path
  INFO("wire " << wire_name(k.wire) << ", direct " << cfg.direct);
  Cluster c(8, 1000, cfg, 50);
  const Spread r = settle(c, Millis(3000));
  std::printf("wire %s%s: %zu exchanges, msd ratio %.3e, worst sum drift %.3e\n",
              std::string(wire_name(k.wire)).c_str(), cfg.direct ? "" : " (copy path)", r.exchanges,
              r.ratio, r.drift);
  CHECK(r.exchanges >= 50);
  CHECK(r.ratio < k.max_ratio);
  CHECK(r.drift < k.max_sum_drift);
}

TEST_CASE("int4-rel: its rounding shrinks with the spread, the sum is kept", "[gossip]") {
  // The same 8 peers as above. int4 stops at its floor (msd ratio 1.8e-3 there); int4-rel's step
  // follows how far partners are, so the spread keeps shrinking. Its first exchanges fail
  // (invalid:range on one side, peer-abort:range on the other) until the steps have widened to
  // the N(0, 1) spread; none of them moves the sum.
  AveragerConfig cfg = base_config();
  cfg.wire = WireFormat::Int4Rel;
  cfg.error_feedback = GENERATE(false, true);
  INFO("error feedback " << cfg.error_feedback);
  Cluster c(8, 1000, cfg, 50);
  const Spread r = settle(c, Millis(12000));
  std::size_t range = 0, peer_range = 0;
  for (auto& p : c.peers) {
    for (const auto& e : p->events) {
      range += e.reason() == "invalid:range";
      peer_range += e.reason() == "peer-abort:range";
    }
  }
  std::printf("int4-rel%s: %zu exchanges, %zu invalid:range, %zu peer-abort:range, msd ratio %.3e, "
              "worst sum drift %.3e\n",
              cfg.error_feedback ? " + error feedback" : "", r.exchanges, range, peer_range, r.ratio,
              r.drift);
  CHECK(r.exchanges >= 200);
  CHECK(range >= 1);       // the first steps are too fine for N(0, 1) values
  CHECK(peer_range >= 1);  // and the sender hears of it
  CHECK(r.ratio < 1e-5);   // int4's floor is 1.8e-3
  CHECK(r.drift < 1e-4);
}

namespace {

// A transport whose connections refuse every other send, as a full bounded send queue does:
// the averager must come back later for its chunks and its commit vote, never drop them.
class RefusingConnection final : public net::Connection {
 public:
  explicit RefusingConnection(net::ConnectionPtr inner) : inner_(std::move(inner)) {}
  const std::string& peer_id() const override { return inner_->peer_id(); }
  const std::string& remote_addr() const override { return inner_->remote_addr(); }
  bool send(std::uint8_t type, net::SharedBytes payload) override {
    if (inner_->is_open() && (++calls_ % 2) == 1) {
      ++refused;
      return false;
    }
    return inner_->send(type, std::move(payload));
  }
  using net::Connection::close;
  void close(net::CloseCause cause) override { inner_->close(std::move(cause)); }
  bool is_open() const override { return inner_->is_open(); }
  std::uint64_t refused = 0;

 private:
  net::ConnectionPtr inner_;
  std::uint64_t calls_ = 0;
};

class RefusingTransport final : public net::Transport, public net::TransportHandler {
 public:
  explicit RefusingTransport(net::SimTransport& inner) : inner_(inner) { inner_.set_handler(this); }
  void set_handler(net::TransportHandler* h) override { handler_ = h; }
  net::Scheduler& scheduler() override { return inner_.scheduler(); }
  const std::string& local_id() const override { return inner_.local_id(); }
  const std::string& listen_addr() const override { return inner_.listen_addr(); }
  const std::string& advertised_addr() const override { return inner_.advertised_addr(); }
  net::BufferPool& buffers() override { return inner_.buffers(); }
  void connect(const std::string& addr, ConnectCallback done) override {
    inner_.connect(addr, [this, done](net::ConnectionPtr c, const net::CloseCause& err) {
      done(c ? wrap(c) : nullptr, err);
    });
  }
  void on_connection(const net::ConnectionPtr& c, bool inbound) override {
    handler_->on_connection(wrap(c), inbound);
  }
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& b) override {
    handler_->on_message(wrap(c), type, std::move(b));
  }
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override {
    handler_->on_closed(wrap(c), reason);
  }
  std::uint64_t refused() const {
    std::uint64_t k = 0;
    for (auto& [inner, w] : wrapped_) k += w->refused;
    return k;
  }

 private:
  net::ConnectionPtr wrap(const net::ConnectionPtr& c) {
    auto& w = wrapped_[c.get()];
    if (!w) w = std::make_shared<RefusingConnection>(c);
    return w;
  }
  net::SimTransport& inner_;
  net::TransportHandler* handler_ = nullptr;
  std::map<net::Connection*, std::shared_ptr<RefusingConnection>> wrapped_;
};

}  // namespace

TEST_CASE("a full send queue delays chunks and votes but never loses them", "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.chunk_bytes = 1000;  // 4000-byte vectors: several chunks each way
  Cluster c(2, 1000, cfg, 60);
  std::vector<std::unique_ptr<RefusingTransport>> wrapped;
  for (std::size_t i = 0; i < 2; ++i) {
    wrapped.push_back(std::make_unique<RefusingTransport>(*c[i].t));
    AveragerConfig pc = cfg;
    pc.seed = 600 + i;
    c[i].avg = std::make_unique<Averager>(pc, *wrapped[i], c[i].dir, c.be);
    wrapped[i]->set_handler(c[i].avg.get());
    SimPeer* raw = &c[i];
    c[i].avg->set_event_callback([raw](const ExchangeEvent& e) { raw->events.push_back(e); });
  }
  const auto x0 = c[0].values(c.be), x1 = c[1].values(c.be);
  c[0].step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(c[0]) && has_event(c[1]); }, Millis(2000)));
  CHECK(c[0].events[0].ok);
  CHECK(c[1].events[0].ok);
  CHECK(wrapped[0]->refused() + wrapped[1]->refused() >= 8);
  const auto y0 = c[0].values(c.be), y1 = c[1].values(c.be);
  for (std::size_t i = 0; i < x0.size(); ++i) {
    REQUIRE(y0[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
    REQUIRE(y1[i] == Approx(0.5f * (x0[i] + x1[i])).margin(1e-6));
  }
}

TEST_CASE("a hand-driven partner completes an exchange, and its vector is checked against our new snapshot",
          "[gossip]") {
  // The partner's whole vector arrives before our first step boundary after ACCEPT, so the snapshot
  // and the validation happen in the same boundary: the norm bound must see the new snapshot.
  AveragerConfig cfg = base_config();
  constexpr std::size_t kN = 1000;
  // ||r - s|| = ||1|| = sqrt(1000) ~ 31.6 against the fresh snapshot; against the zeroed buffer
  // of no snapshot at all it would be ||x + 1|| ~ sqrt(2000) ~ 44.7.
  cfg.max_diff_norm = 40.0;
  cfg.chunk_bytes = 1000;  // our cuts (every 1000 bytes) and the partner's (1600) differ
  cfg.direct = GENERATE(true, false);
  INFO("direct " << cfg.direct);
  Cluster c(1, kN, cfg, 70);
  SimPeer& a = c[0];
  RawPeer f(c.net, "10.0.9.9:7000", "raw-peer");
  const auto xa = a.values(c.be);
  c.serve_all();
  f.dial(a.addr);
  auto idle = [] {};  // a's training loop is stuck in a long step: no boundaries
  REQUIRE(c.run_until([&] { return f.conn != nullptr; }, Millis(100), idle));
  const std::uint64_t id = 99;
  f.send(ExchangeType::Request,
         encode_request({id, cfg.fingerprint, kN, WireFormat::Fp32, false, 0}));
  REQUIRE(c.run_until([&] { return f.got(ExchangeType::Accept); }, Millis(100), idle));
  std::vector<float> r(xa);
  for (auto& v : r) v += 1.0f;
  const auto* p = reinterpret_cast<const std::uint8_t*>(r.data());
  f.send(ExchangeType::Chunk, encode_chunk(id, 0, p, 1600));
  f.send(ExchangeType::Chunk, encode_chunk(id, 1600, p + 1600, kN * 4 - 1600));
  c.run_until([] { return false; }, Millis(20), idle);  // all of it has arrived
  a.hook(c.be, true);  // one boundary: snapshot, then the whole vector validated
  REQUIRE(c.run_until([&] { return f.got(ExchangeType::Valid); }, Millis(100), idle));
  std::size_t chunk_bytes = 0;
  for (auto& [type, b] : f.msgs)
    if (type == static_cast<std::uint8_t>(ExchangeType::Chunk)) chunk_bytes += b.size() - kChunkHeaderBytes;
  CHECK(chunk_bytes == kN * 4);  // a's snapshot came back in full
  f.send(ExchangeType::Valid, encode_id(id));
  REQUIRE(c.run_until([&] { return has_event(a); }, Millis(100)));
  REQUIRE(a.events[0].ok);
  CHECK(a.events[0].w == 0.5f);
  const auto y = a.values(c.be);
  for (std::size_t i = 0; i < kN; ++i) REQUIRE(y[i] == Approx(xa[i] + 0.5f).margin(1e-6));
}

TEST_CASE("a peer waiting for an exchange asks again after BUSY without a step (eager)",
          "[gossip]") {
  AveragerConfig cfg = base_config();
  cfg.hold_max = Millis(0);  // BUSY at once (a held request: below)
  Cluster c(3, 300, cfg, 41);
  SimPeer &a = c[0], &b = c[1], &cc = c[2];
  c.serve_all();
  stall_in_exchange(c, b, cc);
  a.dir.peers = {{b.id, b.addr}};
  a.step_hook(c.be);
  REQUIRE(c.run_until([&] { return has_event(a); }, Millis(1000)));
  REQUIRE(a.events[0].reason() == "busy");
  const std::int64_t step = a.step;
  // Not waiting: boundaries at the same step start nothing.
  c.run_until([] { return false; }, Millis(100), [&] { a.hook(c.be, false); });
  CHECK(a.events.size() == 1);
  CHECK(b.avg->stats().busy_sent == 1);
  // Waiting (the node's --max-lag wait): it asks again, a pause of 5-25 ms after each failure.
  a.avg->set_eager(true);
  c.run_until([] { return false; }, Millis(200), [&] { a.hook(c.be, false); });
  const auto retries = a.events.size() - 1;
  CHECK(retries >= 7);   // at most 25 ms apart
  CHECK(retries <= 41);  // at least 5 ms apart
  for (const auto& e : a.events) CHECK(e.reason() == "busy");
  // B's loop resumes and its exchange with C ends: A's next try is taken, still at the same step.
  b.paused = false;
  REQUIRE(c.run_until([&] { return a.events.back().ok; }, Millis(1000), [&] {
    c.serve_all();
    a.hook(c.be, false);
  }));
  CHECK(a.events.back().partner == b.id);
  CHECK(a.step == step);
  a.avg->set_eager(false);
}
