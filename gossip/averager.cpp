// The pairwise push-pull averaging exchange. Protocol (message layouts in exchange_messages.hpp):
//   initiator                                  responder
//   REQUEST(id, fingerprint, n, wire, samples) ->
//                                              <- BUSY | REFUSE(code) | ACCEPT(id, samples)
//   CHUNK* (own snapshot, as soon as ACCEPT)    <- CHUNK* (as soon as its training thread made one)
//   VALID (all of r received + validated)       <- VALID
// Each side applies x += w (r - s) once it has validated r AND holds the other's VALID (a two-vote
// commit); anything else (close, timeout, Abort, bad data) ends the exchange with nothing applied.
// The one window left, inherent to any commit over a lossy link: a side whose VALID is lost after
// it committed applies alone; the other side then reports "closed" or "timeout".
//
// Connections: the initiator dials a dedicated connection per partner for exchanges (reused while
// open, closed after idle_close), so membership traffic on the other connection never queues behind
// a 100 MB payload. The responder answers on the connection the REQUEST came in on. A failed
// exchange closes its connection so no stale chunk can ever reach a later exchange.
//
// Validation: the protocol thread checks every value of the partner's vector on the wire bytes as
// each chunk arrives (WireChecker), and votes as soon as the last one is in, so an exchange waits
// on the training thread only twice: for the responder's snapshot and for the mix. Only the
// optional norm bound, which needs our snapshot on the device, is checked at a step boundary.
//
// Cost on the training thread, per exchange: the snapshot (params -> chunk messages, streamed to
// the protocol thread as they fill, then params -> s unless in direct mode), the partner's chunks
// uploaded (and decoded) at each step boundary while they arrive (direct mode: kept as received),
// and the mix. The protocol thread never copies payload bytes: chunks go out as cut and come in as
// received, and received ones go back to the transport's buffer pool once used. Every send
// respects the connection's bounded queue (retry after send_retry) and the optional rate cap.
#include "gossip/averager.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "gossip/dispatcher.hpp"
#include "net/buffer_pool.hpp"

namespace gossiptrain::gossip {

namespace {
using kernels::encoded_size;
using net::Millis;
constexpr auto kReq = static_cast<std::uint8_t>(ExchangeType::Request);
constexpr auto kAcc = static_cast<std::uint8_t>(ExchangeType::Accept);
constexpr auto kBusy = static_cast<std::uint8_t>(ExchangeType::Busy);
constexpr auto kRef = static_cast<std::uint8_t>(ExchangeType::Refuse);
constexpr auto kChunk = static_cast<std::uint8_t>(ExchangeType::Chunk);
constexpr auto kValid = static_cast<std::uint8_t>(ExchangeType::Valid);
constexpr auto kAbort = static_cast<std::uint8_t>(ExchangeType::Abort);

std::string short_id(const std::string& id) { return id.substr(0, 8); }
// While a snapshot is being cut into chunks, the sender is woken every this many chunks.
constexpr std::size_t kChunksPerWakeup = 8;
}  // namespace

FaultConfig parse_fault(const std::string& spec) {
  FaultConfig f;
  if (spec == "random") f.mode = FaultMode::Random;
  else if (spec == "signflip") f.mode = FaultMode::SignFlip;
  else if (spec == "stale") f.mode = FaultMode::Stale;
  else if (spec == "nan") f.mode = FaultMode::NaN;
  else if (spec.rfind("scale:", 0) == 0) {
    f.mode = FaultMode::Scale;
    std::size_t used = 0;
    try {
      f.scale = std::stod(spec.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != spec.size() - 6 || !std::isfinite(f.scale) || f.scale == 0)
      throw std::invalid_argument("fault: scale:K needs a finite nonzero K, got '" + spec + "'");
  } else {
    throw std::invalid_argument("fault: '" + spec + "' is not scale:K|random|signflip|stale|nan");
  }
  return f;
}

std::string_view role_name(ExchangeRole r) {
  return r == ExchangeRole::Initiator ? "initiator" : "responder";
}

Averager::Averager(AveragerConfig cfg, net::Transport& transport, Dispatcher& dispatcher,
                   const PeerDirectory& peers, kernels::Backend& backend)
    : Averager(std::move(cfg), transport, peers, backend) {
  dispatcher.add(kExchangeTypeFirst, kExchangeTypeLast, this);
}

Averager::Averager(AveragerConfig cfg, net::Transport& transport, const PeerDirectory& peers,
                   kernels::Backend& backend)
    : cfg_(std::move(cfg)),
      transport_(transport),
      sched_(transport.scheduler()),
      peers_(peers),
      be_(backend),
      choice_(cfg_.choice),
      bound_(cfg_.robust) {
  if (cfg_.gossip_every < 1) throw std::invalid_argument("averager: gossip_every must be >= 1");
  if (cfg_.max_tries < 1) throw std::invalid_argument("averager: max_tries must be >= 1");
  if (cfg_.chunk_bytes < 1) throw std::invalid_argument("averager: chunk_bytes must be >= 1");
  if (!(cfg_.min_rate_bytes_per_s > 0))
    throw std::invalid_argument("averager: min_rate_bytes_per_s must be > 0");
  if (!(cfg_.max_diff_norm >= 0)) throw std::invalid_argument("averager: max_diff_norm < 0");
  set_max_rate(cfg_.max_rate_bytes_per_s);
  if (cfg_.chunk_bytes % 4 != 0)
    throw std::invalid_argument("averager: chunk_bytes must be a multiple of 4");
  // Direct mode: values element-wise on the wire (not int8, whose block scales come first).
  direct_ = cfg_.direct && be_.host_memory() && cfg_.wire != kernels::Wire::Int8;
  rng_.seed(cfg_.seed ? cfg_.seed : std::random_device{}());
  next_initiate_step_ = cfg_.gossip_every;
}

Averager::~Averager() {
  alive_.reset();
  if (ex_) {
    if (ex_->deadline) sched_.cancel(ex_->deadline);
    if (ex_->retry) sched_.cancel(ex_->retry);
  }
}

void Averager::set_max_rate(double bytes_per_s) {
  const bool ok = bytes_per_s == 0 || bytes_per_s >= cfg_.min_rate_bytes_per_s;
  if (!std::isfinite(bytes_per_s) || !ok)
    throw std::invalid_argument("averager: the send rate cap must be 0 (none) or at least " +
                                std::to_string(cfg_.min_rate_bytes_per_s) + " bytes/s");
  max_rate_.store(bytes_per_s);
}

AveragerStats Averager::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

bool Averager::in_exchange() const {
  std::lock_guard<std::mutex> lk(mu_);
  return active_ || committed_unreported_;
}

template <typename Fn>
void Averager::post(Fn fn) {
  std::weak_ptr<bool> alive = alive_;
  sched_.post([alive, fn = std::move(fn)]() mutable {
    if (alive.lock()) fn();
  });
}

float Averager::weight(std::int64_t n_self, std::int64_t n_other) const {
  if (!cfg_.weight_by_samples || n_self < 0 || n_other < 0 || n_self + n_other <= 0) return 0.5f;
  return static_cast<float>(static_cast<double>(n_other) /
                            (static_cast<double>(n_self) + static_cast<double>(n_other)));
}

// ------------------------------------------------------------------------------------------------
// Training thread

void Averager::ensure_buffers(core::StepContext& ctx) {
  if (&ctx.backend != &be_)
    throw std::logic_error("averager: between_steps called with another backend");
  if (n_params_.load() == ctx.n_params) return;
  if (n_params_.load() != 0)
    throw std::logic_error("averager: the parameter count changed between steps");
  n_params_.store(ctx.n_params);
  if (direct_) {
    if (cfg_.wire != kernels::Wire::Fp32) scratch_.resize(2 * kScratchValues);
    return;
  }
  s_ = kernels::DeviceBuffer<float>(be_, ctx.n_params);
  r_ = kernels::DeviceBuffer<float>(be_, ctx.n_params);
  // The fp32 encoding is the raw floats: snapshots go straight from the parameters into their
  // chunks, received chunks straight into r_. For the others, sending and receiving each have their own encoded buffer: the partner's chunks may arrive
  // before we encode our snapshot.
  if (cfg_.wire != kernels::Wire::Fp32) {
    enc_ = kernels::DeviceBuffer<std::uint8_t>(be_, encoded_size(cfg_.wire, ctx.n_params));
    rx_enc_ = kernels::DeviceBuffer<std::uint8_t>(be_, encoded_size(cfg_.wire, ctx.n_params));
  }
}

// Takes our snapshot straight into the chunk messages and, for exchange seq, hands them to the
// protocol thread as they fill, so streaming starts after the first few chunks instead of after
// the whole copy (seq 0: a standing snapshot, published by the caller once whole). The parameters
// cannot change meanwhile: this is the training thread. s, the snapshot the mix subtracts, is
// exactly what was sent (decoded), so that an exchange conserves the sum of the two vectors with
// the lossy wires too: direct mode reads it from the chunks, the copy path keeps it in s_.
ChunkSetPtr Averager::snapshot(core::StepContext& ctx, std::uint64_t seq) {
  const std::size_t bytes = encoded_size(cfg_.wire, ctx.n_params);
  // What we send: our parameters, or a faulty peer's corruption of them.
  const float* x = cfg_.fault.mode == FaultMode::None ? ctx.params : fault_source(ctx);
  const std::uint8_t* src = reinterpret_cast<const std::uint8_t*>(x);
  const bool encode_per_chunk = direct_ && cfg_.wire != kernels::Wire::Fp32;
  if (cfg_.wire != kernels::Wire::Fp32 && !encode_per_chunk) {
    be_.encode(cfg_.wire, x, ctx.n_params, enc_.data());
    src = enc_.data();
  }
  // Reuse the last snapshot's messages when the protocol thread and the transport let go of them
  // all (only they could still hold references, and they only ever drop them), saving ~100 MB of
  // fresh zeroed pages per exchange.
  bool reuse = pool_ && pool_.use_count() == 1;
  if (reuse)
    for (const auto& c : pool_->chunks) reuse = reuse && c.use_count() == 1;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (!reuse) {
    pool_ = std::make_shared<ChunkSet>();
    for (std::size_t off = 0; off < bytes; off += cfg_.chunk_bytes)
      pool_->chunks.push_back(std::make_shared<net::Bytes>(
          kChunkHeaderBytes + std::min(cfg_.chunk_bytes, bytes - off)));
    pool_->payload_bytes = bytes;
  }
  pool_->ready.store(0);
  ChunkSetPtr own = pool_;
  if (seq) post([this, seq, own] { snapshot_ready(seq, own); });
  std::size_t off = 0;
  const std::size_t n = own->chunks.size();
  for (std::size_t k = 0; k < n; ++k) {
    auto& c = own->chunks[k];
    const std::size_t len = c->size() - kChunkHeaderBytes;
    if (encode_per_chunk)  // element-wise 2-byte values, each chunk holding whole ones
      be_.encode(cfg_.wire, x + off / 2, len / 2, c->data() + kChunkHeaderBytes);
    else
      be_.download(c->data() + kChunkHeaderBytes, src + off, len);
    off += len;
    own->ready.store(k + 1, std::memory_order_release);
    if (seq && ((k + 1) % kChunksPerWakeup == 0 || k + 1 == n))
      post([this, seq] { chunks_ready(seq); });
  }
  if (!direct_) {
    if (cfg_.wire == kernels::Wire::Fp32)
      be_.copy(s_.data(), x, ctx.n_params * sizeof(float));
    else
      be_.decode(cfg_.wire, enc_.data(), ctx.n_params, s_.data());
  }
  if (seq) spdlog::trace("averager: #{} snapshot taken ({} bytes)", seq, bytes);
  else spdlog::trace("averager: standing snapshot taken at step {}", ctx.step);
  return own;
}

// Takes the partner's chunks that arrived since the last step boundary (their values were
// checked on the protocol thread as they came in). Direct mode keeps them, as received, for the
// mix. Otherwise they are uploaded (and the complete values of the element-wise wires decoded on
// the way, so neither the upload nor the decode of a 100 MB vector trails the transfer) and their
// buffers go back to the transport's pool.
void Averager::receive(core::StepContext& ctx, ChunkList& chunks) {
  const std::size_t bytes = encoded_size(cfg_.wire, ctx.n_params);
  const bool fp32 = cfg_.wire == kernels::Wire::Fp32;
  std::uint8_t* dst = nullptr;  // direct mode: kept as received
  if (!direct_) dst = fp32 ? reinterpret_cast<std::uint8_t*>(r_.data()) : rx_enc_.data();
  for (auto& c : chunks) {
    const std::size_t len = c.size() - kChunkHeaderBytes;
    if (len > bytes - rx_bytes_)  // on_chunk refuses such a chunk before handing it over
      throw std::logic_error("averager: more bytes handed over than the vector holds");
    if (direct_) {
      rx_chunks_.push_back(std::move(c));
    } else {
      be_.upload(dst + rx_bytes_, c.data() + kChunkHeaderBytes, len);
      net::recycle(std::move(c));
    }
    rx_bytes_ += len;
  }
  chunks.clear();
  // fp16 and bf16 are element-wise: every complete element can be decoded now. int8 keeps its
  // block scales at the front, so it is decoded whole at the end.
  if (!direct_ && (cfg_.wire == kernels::Wire::Fp16 || cfg_.wire == kernels::Wire::Bf16)) {
    const std::size_t ready = rx_bytes_ / 2;
    if (ready > rx_decoded_)
      be_.decode(cfg_.wire, rx_enc_.data() + rx_decoded_ * 2, ready - rx_decoded_,
                 r_.data() + rx_decoded_);
    rx_decoded_ = ready;
  }
}

// The whole vector is in r_ (decoded) once this returns.
void Averager::decode_rest(core::StepContext& ctx) {
  if (rx_bytes_ != encoded_size(cfg_.wire, ctx.n_params))
    throw std::logic_error("averager: the partner's vector is incomplete at the end");
  if (cfg_.wire == kernels::Wire::Int8 && rx_decoded_ < ctx.n_params)
    be_.decode(cfg_.wire, rx_enc_.data(), ctx.n_params, r_.data());
  rx_decoded_ = ctx.n_params;
}

// Direct mode: our snapshot is read from its chunk messages (pool_, the last snapshot taken:
// every exchange is mixed before the next snapshot), the partner's vector from its chunk messages
// as received (rx_chunks_), walking both lists together: their cuts may differ. Every chunk holds
// whole values: ours because chunk_bytes is a multiple of 4, the partner's because on_chunk
// refuses chunks that do not. fn(first, r, s, n) gets the encoded values [first, first + n).
template <typename Fn>
void Averager::for_each_span(std::size_t n_params, Fn fn) {
  const std::size_t vb = kernels::wire_value_bytes(cfg_.wire);
  auto values = [vb](const net::Bytes& c) {
    return std::pair{c.data() + kChunkHeaderBytes, (c.size() - kChunkHeaderBytes) / vb};
  };
  std::size_t first = 0, si = 0, ri = 0, so = 0, ro = 0;  // chunk index, and value offset in it
  while (first < n_params) {
    if (si == pool_->chunks.size() || ri == rx_chunks_.size())
      throw std::logic_error("averager: the chunks do not cover the vector");
    const auto [s, sn] = values(*pool_->chunks[si]);
    const auto [r, rn] = values(rx_chunks_[ri]);
    const std::size_t n = std::min(sn - so, rn - ro);
    if (n) fn(first, r + ro * vb, s + so * vb, n);
    first += n;
    so += n;
    ro += n;
    if (so == sn) ++si, so = 0;
    if (ro == rn) ++ri, ro = 0;
  }
}

// The whole vector as float spans fn(first, r, s, n): the copy path's r_ and s_ in one span;
// direct mode's messages, fp32 as they are, fp16 and bf16 decoded a cache-sized block at a time
// into scratch_.
template <typename Fn>
void Averager::for_each_float_span(std::size_t n_params, Fn fn) {
  if (!direct_) {
    fn(0, r_.data(), s_.data(), n_params);
    return;
  }
  for_each_span(n_params, [&](std::size_t first, const std::uint8_t* r, const std::uint8_t* s,
                              std::size_t n) {
    if (cfg_.wire == kernels::Wire::Fp32) {
      fn(first, reinterpret_cast<const float*>(r), reinterpret_cast<const float*>(s), n);
      return;
    }
    float* rf = scratch_.data();
    float* sf = scratch_.data() + kScratchValues;
    for (std::size_t k = 0; k < n; k += kScratchValues) {
      const std::size_t m = std::min(kScratchValues, n - k);
      be_.decode(cfg_.wire, r + 2 * k, m, rf);
      be_.decode(cfg_.wire, s + 2 * k, m, sf);
      fn(first + k, rf, sf, m);
    }
  });
}

// ||r - s|| of partner's vector (complete at `at`) against this exchange's snapshot, judged.
Averager::Verdict Averager::check_norm(core::StepContext& ctx, const std::string& partner,
                                       net::Millis at) {
  decode_rest(ctx);
  double sq = 0.0;
  for_each_float_span(ctx.n_params, [&](std::size_t, const float* r, const float* s,
                                        std::size_t n) { sq += be_.sq_diff_norm(r, s, n); });
  auto own = [&] {
    double own_sq = 0.0;
    for_each_float_span(ctx.n_params, [&](std::size_t, const float*, const float* s,
                                          std::size_t n) { own_sq += sq_norm(s, n); });
    return std::sqrt(own_sq);
  };
  return judge(partner, std::sqrt(sq), own, at);
}

// The bounds on a measured ||r - s||: the optional fixed one, and with clipped mixing the
// adaptive one (RobustBound: tau, and the refusals as anomalous). A faulty peer never refuses: it
// is there to be refused by others.
Averager::Verdict Averager::judge(const std::string& partner, double norm,
                                  const std::function<double()>& own_norm, net::Millis now) {
  Verdict v;
  v.norm = norm;
  if (cfg_.max_diff_norm > 0 && !(v.norm <= cfg_.max_diff_norm)) v.reason = "invalid:norm";
  if (cfg_.robust.mix != MixMode::Clipped) return v;
  const RobustBound::Judgement j = bound_.judge(partner, norm, own_norm, now);
  v.tau = j.tau;
  if (j.suspect)
    spdlog::info("averager: ||r - s|| = {:.4g} from {} is far persistently ({} in a row): "
                 "clipped to {:.4g}", norm, short_id(partner), j.streak, j.tau);
  if (!j.why.empty() && cfg_.fault.mode == FaultMode::None) {
    if (v.reason.empty()) v.reason = "anomalous";
    spdlog::info(
        "averager: ||r - s|| = {:.4g} from {} is anomalous ({}): tau {:.4g}, ratio {:.3g}, "
        "partner's typical ratio {:.3g}",
        norm, short_id(partner), j.why, j.tau, j.ratio, j.typical);
  }
  return v;
}

// Protocol thread, direct fp32: adds the partner's chunk [offset, offset + size) bytes against
// the same bytes of our snapshot, when the training thread has already cut them.
void Averager::fast_norm_chunk(Exchange& e, const std::uint8_t* r, std::size_t offset,
                               std::size_t size) {
  const std::size_t cb = cfg_.chunk_bytes;
  if (!e.own || std::min(e.own->ready_count() * cb, e.own->payload_bytes) < offset + size) {
    e.fast_norm = false;
    return;
  }
  while (size > 0) {
    const std::size_t k = offset / cb, within = offset % cb;
    const net::Bytes& c = *e.own->chunks[k];
    const std::size_t m = std::min(size, c.size() - kChunkHeaderBytes - within);
    e.sq += be_.sq_diff_norm(reinterpret_cast<const float*>(r),
                             reinterpret_cast<const float*>(c.data() + kChunkHeaderBytes + within),
                             m / sizeof(float));
    r += m;
    offset += m;
    size -= m;
  }
}

// ||s||^2 of our whole snapshot (protocol thread, direct fp32, every chunk cut).
double Averager::fast_own_sq_norm(const Exchange& e) {
  if (zeros_host_.size() != kScratchValues) zeros_host_.assign(kScratchValues, 0.0f);
  double sq = 0.0;
  for (const auto& c : e.own->chunks) {
    const float* x = reinterpret_cast<const float*>(c->data() + kChunkHeaderBytes);
    const std::size_t n = (c->size() - kChunkHeaderBytes) / sizeof(float);
    for (std::size_t k = 0; k < n; k += kScratchValues)
      sq += be_.sq_diff_norm(x + k, zeros_host_.data(), std::min(kScratchValues, n - k));
  }
  return sq;
}

double Averager::sq_norm(const float* x, std::size_t n) {
  if (zeros_.size() != kScratchValues) zeros_ = kernels::DeviceBuffer<float>(be_, kScratchValues);
  double sq = 0.0;
  for (std::size_t k = 0; k < n; k += kScratchValues)
    sq += be_.sq_diff_norm(x + k, zeros_.data(), std::min(kScratchValues, n - k));
  return sq;
}

void Averager::mix_applied(double norm, double tau) {
  if (cfg_.robust.mix != MixMode::Clipped || !(norm >= 0)) return;
  bound_.accepted(norm, tau);
}

// A faulty peer's vector: our parameters corrupted on the host (download, change, upload), so it
// works with any backend. Stale: the first snapshot ever taken, sent again and again.
const float* Averager::fault_source(core::StepContext& ctx) {
  const std::size_t n = ctx.n_params;
  fault_host_.resize(n);
  be_.download(fault_host_.data(), ctx.params, n * sizeof(float));
  switch (cfg_.fault.mode) {
    case FaultMode::Scale:
      for (float& v : fault_host_) v = static_cast<float>(v * cfg_.fault.scale);
      break;
    case FaultMode::SignFlip:
      for (float& v : fault_host_) v = -v;
      break;
    case FaultMode::Random: {
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float& v : fault_host_) v = g(fault_rng_);
      break;
    }
    case FaultMode::Stale:
      if (fault_stale_.empty()) fault_stale_ = fault_host_;
      fault_host_ = fault_stale_;
      break;
    case FaultMode::NaN:
      fault_host_[n / 2] = std::numeric_limits<float>::quiet_NaN();
      break;
    case FaultMode::None: break;
  }
  if (fault_x_.size() != n) fault_x_ = kernels::DeviceBuffer<float>(be_, n);
  be_.upload(fault_x_.data(), fault_host_.data(), n * sizeof(float));
  return fault_x_.data();
}

void Averager::rx_switch(std::uint64_t seq) {
  if (seq == rx_seq_) return;
  rx_seq_ = seq;  // a new exchange: nothing of the partner's vector received yet
  rx_bytes_ = rx_decoded_ = 0;
  recycle_all(rx_chunks_);  // what a failed exchange left
}

void Averager::recycle_all(ChunkList& chunks) {
  for (auto& c : chunks) net::recycle(std::move(c));
  chunks.clear();
}

void Averager::between_steps(core::StepContext& ctx) {
  // Let the other runnable threads of this machine (our protocol thread first of all) have the CPU
  // now: on an oversubscribed machine (many peers on few cores) a partner's exchange otherwise
  // waits a whole scheduler slice for our next step boundary. Costs nothing on an idle core.
  if (cfg_.yield_between_steps) std::this_thread::yield();
  ensure_buffers(ctx);
  own_samples_.store(ctx.shard_size);
  bool do_snapshot = false, initiate = false, refresh = false;
  std::optional<PendingMix> mix;
  std::uint64_t seq = 0;
  ChunkList in;
  bool in_complete = false, in_norm = false;
  std::string in_partner;
  net::Millis in_at{0};
  {
    std::lock_guard<std::mutex> lk(mu_);
    mix.swap(pending_);
    seq = seq_;
    if (active_) {
      in.swap(incoming_);
      in_complete = incoming_complete_;
      in_norm = incoming_norm_;
      if (in_norm) {
        in_partner = incoming_partner_;
        in_at = incoming_at_;
      }
      incoming_complete_ = incoming_norm_ = false;
      do_snapshot = want_snapshot_;
      want_snapshot_ = false;
    }
    const bool may_start = ctx.training_done ? cfg_.initiate_when_done
                                             : ctx.step >= next_initiate_step_;
    if (!active_ && may_start) {
      active_ = true;
      seq = ++seq_;
      initiate = true;
      standing_.reset();  // s_ is about to be overwritten
    }
    // Idle: keep a snapshot ready, so a partner's request is answered without waiting for a step
    // boundary. It stays valid (nothing applied since) as training goes on, merely older: the mix
    // x += w (r - s) keeps our progress since s. Refreshed every gossip_every steps, and after
    // every exchange (which consumes or invalidates it).
    if (!active_ && (!standing_ || ctx.step >= standing_step_ + cfg_.gossip_every)) {
      refresh = true;
      standing_.reset();  // withdrawn while s_ is overwritten; requests meanwhile wait for it
    }
  }
  std::uint64_t failing = seq;
  try {
    // A committed mix first: the snapshot of the next exchange must contain it, and r_ and s_
    // are free for the next exchange once it is applied.
    if (mix) {
      failing = mix->seq;
      rx_switch(mix->seq);
      receive(ctx, mix->rest);
      decode_rest(ctx);
      // A faulty peer mixes nothing into itself (its s is the corrupted vector it sent).
      if (cfg_.fault.mode == FaultMode::None)
        for_each_float_span(ctx.n_params, [&](std::size_t first, const float* r, const float* s,
                                              std::size_t n) {
          be_.mix(ctx.params + first, r, s, n, mix->w);
        });
      mix_applied(mix->norm, mix->tau);
      recycle_all(rx_chunks_);  // direct mode's messages (none on the copy path)
      spdlog::trace("averager: #{} mixed with w={}", mix->seq, mix->w);
      post([this, s = mix->seq] { applied(s); });
      failing = seq;
    }
    if (initiate) {
      // The request goes out while we take the snapshot: it overlaps the round trip and the
      // responder's own snapshot instead of preceding them.
      next_initiate_step_ = ctx.step + cfg_.gossip_every;
      const std::int64_t samples = ctx.shard_size;
      post([this, seq, samples] { start_initiator(seq, samples); });
    }
    // Before the norm check: it compares against this exchange's snapshot.
    if (do_snapshot || initiate) snapshot(ctx, seq);
    if (refresh) {
      ChunkSetPtr own = snapshot(ctx, 0);
      std::lock_guard<std::mutex> lk(mu_);
      if (active_ && want_snapshot_) {  // a request came in meanwhile: it gets this one
        want_snapshot_ = false;
        post([this, s = seq_, own] {
          snapshot_ready(s, own);
          chunks_ready(s);
        });
      } else if (!active_) {
        standing_ = std::move(own);
        standing_step_ = ctx.step;
      }
    }
    rx_switch(seq);
    if (!in.empty()) receive(ctx, in);
    // Only the norm bounds need the training thread's vote; finiteness was checked on arrival.
    if (in_complete && in_norm) {
      const Verdict v = check_norm(ctx, in_partner, in_at);
      spdlog::trace("averager: #{} ||r - s|| = {} (tau {}): {}", seq, v.norm, v.tau,
                    v.reason.empty() ? "ok" : v.reason);
      post([this, seq, v] { validated(seq, v); });
    }
  } catch (const std::exception& e) {
    // A backend failure is not the network's fault: end the exchange cleanly, then let the
    // training loop see the error.
    spdlog::error("averager: failure during an exchange: {}", e.what());
    post([this, failing] {
      if (ex_ && ex_->seq == failing) fail("backend", ExchangeCode::Shutdown);
    });
    throw;
  }
}

// ------------------------------------------------------------------------------------------------
// Protocol thread: initiator side

void Averager::start_initiator(std::uint64_t seq, std::int64_t samples) {
  assert(!ex_ && "an exchange was claimed while another was in flight");
  Exchange e;
  e.seq = seq;
  e.role = ExchangeRole::Initiator;
  e.n_self = samples;
  e.started = sched_.now();
  ex_ = std::move(e);
  try_next_peer();
}

void Averager::try_next_peer() {
  Exchange& e = *ex_;
  if (e.tries >= cfg_.max_tries) {
    fail(e.last_reason.empty() ? "busy" : e.last_reason, std::nullopt);
    return;
  }
  std::vector<PeerRef> cands;
  for (auto& p : peers_.live_peers())
    if (p.id != transport_.local_id() && !e.excluded.count(p.id) && !banned(p.id))
      cands.push_back(std::move(p));
  if (cands.empty()) {
    if (e.tries > 0) {
      fail(e.last_reason, std::nullopt);
      return;
    }
    // Nothing to ask (alone, or membership not there yet): not an exchange, no event.
    spdlog::debug("averager: no live peer to average with");
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.no_peer;
    active_ = false;
    ex_.reset();
    return;
  }
  const PeerRef p = cands[choice_.pick(cands, rng_)];
  ++e.tries;
  e.partner = p.id;
  e.asked = sched_.now();
  e.phase = Phase::Connecting;
  e.conn = nullptr;
  e.id = 0;
  e.control.clear();
  auto it = own_conns_.find(p.id);
  if (it != own_conns_.end() && it->second.conn->is_open()) {
    ask(it->second.conn);
    return;
  }
  arm_deadline(cfg_.answer_timeout, "timeout:connect");
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = e.seq;
  transport_.connect(p.addr, [this, alive, seq, id = p.id](net::ConnectionPtr c,
                                                           const std::string& err) {
    if (!alive.lock()) return;
    if (!ex_ || ex_->seq != seq || ex_->phase != Phase::Connecting || ex_->partner != id) {
      // We yielded or gave up meanwhile: keep a good connection for later exchanges.
      if (c && c->is_open() && c->peer_id() == id && !own_conns_.count(id)) {
        own_conns_[id] = OwnConn{c, sched_.now()};
        schedule_idle_close(id);
      } else if (c) {
        c->close("exchange connection no longer needed");
      }
      return;
    }
    if (!c) {
      spdlog::debug("averager: connect to {} failed: {}", short_id(id), err);
      try_failed("connect", false);
      return;
    }
    if (c->peer_id() != id) {
      c->close("exchange: unexpected peer id");
      try_failed("connect", false);
      return;
    }
    own_conns_[id] = OwnConn{c, sched_.now()};
    ask(c);
  });
}

void Averager::ask(const net::ConnectionPtr& c) {
  Exchange& e = *ex_;
  e.conn = c;
  e.phase = Phase::Requested;
  do e.id = rng_();
  while (e.id == 0);
  own_conns_[e.partner].last_used = sched_.now();
  RequestMsg m;
  m.exchange_id = e.id;
  m.fingerprint = cfg_.fingerprint;
  m.n_params = n_params_.load();
  m.wire = cfg_.wire;
  m.weighted = cfg_.weight_by_samples;
  m.samples = e.n_self;
  arm_deadline(cfg_.answer_timeout, "timeout:answer");
  queue_control(kReq, encode_request(m));
}

// The current peer did not take part (busy, refused, unreachable, silent): ask another one.
void Averager::try_failed(std::string reason, bool close_conn) {
  Exchange& e = *ex_;
  if (e.deadline) sched_.cancel(e.deadline);
  e.deadline = 0;
  e.excluded.insert(e.partner);
  e.last_reason = reason;
  // A partner that did not answer in time costs us that time, like a slow exchange.
  if (reason.rfind("timeout", 0) == 0)
    choice_.record(e.partner, double((sched_.now() - e.asked).count()), sched_.now());
  if (close_conn && e.conn) {
    // A late answer on this connection must not be mistaken for a new exchange's.
    own_conns_.erase(e.partner);
    e.conn->close("exchange: " + reason);
  }
  e.conn = nullptr;
  try_next_peer();
}

void Averager::on_accept(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = parse_accept(b);
  if (!m) return violation(c, "malformed accept");
  if (!is_current(c, m->exchange_id) || ex_->role != ExchangeRole::Initiator ||
      ex_->phase != Phase::Requested)
    return violation(c, "unexpected accept");
  Exchange& e = *ex_;
  e.n_other = m->samples;
  e.w = weight(e.n_self, e.n_other);
  e.phase = Phase::Transferring;
  spdlog::trace("averager: #{} accepted by {}", e.seq, short_id(e.partner));
  begin_transfer();
}

void Averager::on_busy_or_refuse(const net::ConnectionPtr& c, std::uint8_t type,
                                 const net::Bytes& b) {
  std::uint64_t id = 0;
  std::string reason = "busy";
  if (type == kBusy) {
    auto m = parse_id(b);
    if (!m) return violation(c, "malformed busy");
    id = m->exchange_id;
  } else {
    auto m = parse_code(b);
    if (!m) return violation(c, "malformed refuse");
    id = m->exchange_id;
    reason = "refused:" + std::string(code_name(m->code));
  }
  if (c == withdrawn_.conn && id == withdrawn_.id) {
    withdrawn_ = {};
    return;
  }
  if (!is_current(c, id) || ex_->role != ExchangeRole::Initiator || ex_->phase != Phase::Requested)
    return violation(c, "unexpected busy/refuse");
  if (type == kRef)
    spdlog::warn("averager: peer {} refused to average: {}", short_id(ex_->partner), reason);
  try_failed(reason, false);
}

// ------------------------------------------------------------------------------------------------
// Protocol thread: responder side

void Averager::on_request(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = parse_request(b);
  if (!m) return violation(c, "malformed request");
  const std::size_t n = n_params_.load();
  std::optional<ExchangeCode> refuse;
  if (n != 0) {
    if (m->fingerprint != cfg_.fingerprint) refuse = ExchangeCode::Fingerprint;
    else if (m->n_params != n) refuse = ExchangeCode::Size;
    else if (m->wire != cfg_.wire) refuse = ExchangeCode::Wire;
    else if (m->weighted != cfg_.weight_by_samples) refuse = ExchangeCode::Weighting;
  }
  if (!refuse && banned(c->peer_id())) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.refused_sent;
    }
    spdlog::debug("averager: refusing exchange from {}: banned", short_id(c->peer_id()));
    c->send(kRef, encode_code(m->exchange_id, ExchangeCode::Banned));
    return;
  }
  if (refuse) {
    spdlog::warn("averager: refusing exchange from {}: {} mismatch", short_id(c->peer_id()),
                 code_name(*refuse));
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.refused_sent;
    }
    c->send(kRef, encode_code(m->exchange_id, *refuse));
    return;
  }
  if (ex_ && should_yield(c, *m)) return yield_to(c, *m);
  std::uint64_t seq = 0;
  bool busy = false;
  ChunkSetPtr own;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Before our first step boundary we have no parameters to offer: as good as busy.
    if (active_ || n == 0) {
      busy = true;
      ++stats_.busy_sent;
    } else {
      active_ = true;
      seq = ++seq_;
      if (standing_) own.swap(standing_);  // streamed at once
      else want_snapshot_ = true;          // taken at the next step boundary
    }
  }
  if (busy) {
    c->send(kBusy, encode_id(m->exchange_id));
    return;
  }
  if (!own) request_boundary();  // the snapshot waits for a step boundary
  assert(!ex_);
  Exchange e;
  e.seq = seq;
  e.id = m->exchange_id;
  e.role = ExchangeRole::Responder;
  e.phase = Phase::Transferring;
  e.partner = c->peer_id();
  e.conn = c;
  e.started = e.asked = sched_.now();
  e.n_self = own_samples_.load();
  e.n_other = m->samples;
  e.w = weight(e.n_self, e.n_other);
  e.own = std::move(own);
  ex_ = std::move(e);
  ex_->control.emplace_back(kAcc, encode_accept({m->exchange_id, ex_->n_self}));
  begin_transfer();
}

// An initiator that has not been answered yet may become the responder of an incoming request
// instead, with the snapshot it takes anyway: always while still dialling (nothing sent yet),
// and when two peers ask each other at once (crossing requests), the lower exchange id wins on both
// sides. Without this, two peers stepping in lockstep would answer each other BUSY forever.
bool Averager::should_yield(const net::ConnectionPtr& c, const RequestMsg& m) const {
  if (ex_->role != ExchangeRole::Initiator) return false;
  if (ex_->phase == Phase::Connecting) return true;
  return ex_->phase == Phase::Requested && ex_->partner == c->peer_id() && m.exchange_id < ex_->id;
}

void Averager::yield_to(const net::ConnectionPtr& c, const RequestMsg& m) {
  Exchange& e = *ex_;
  if (e.deadline) sched_.cancel(e.deadline);
  e.deadline = 0;
  // The partner answers our withdrawn request with BUSY (it applies the same rule): ignore it.
  if (e.phase == Phase::Requested) withdrawn_ = {e.conn, e.id};
  spdlog::debug("averager: yielding our request to {} for {}'s", short_id(e.partner),
                short_id(c->peer_id()));
  e.role = ExchangeRole::Responder;
  e.phase = Phase::Transferring;
  e.id = m.exchange_id;
  e.partner = c->peer_id();
  e.conn = c;
  e.started = e.asked = sched_.now();
  e.n_other = m.samples;
  e.w = weight(e.n_self, e.n_other);
  e.tries = 0;
  e.excluded.clear();
  e.last_reason.clear();
  e.control.clear();
  e.control.emplace_back(kAcc, encode_accept({m.exchange_id, e.n_self}));
  begin_transfer();
}

void Averager::snapshot_ready(std::uint64_t seq, ChunkSetPtr own) {
  if (!ex_ || ex_->seq != seq) return;  // ended meanwhile (e.g. no peer to ask)
  ex_->own = std::move(own);
  pump_send();  // no-op until accepted
}

void Averager::chunks_ready(std::uint64_t seq) {
  if (ex_ && ex_->seq == seq && ex_->retry == 0) pump_send();
}

// ------------------------------------------------------------------------------------------------
// Protocol thread: both sides

void Averager::arm_deadline(Millis d, const std::string& what) {
  Exchange& e = *ex_;
  if (e.deadline) sched_.cancel(e.deadline);
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = e.seq;
  e.deadline = sched_.schedule(d, [this, alive, seq, what] {
    if (!alive.lock() || !ex_ || ex_->seq != seq) return;
    ex_->deadline = 0;
    if (ex_->phase == Phase::Connecting || ex_->phase == Phase::Requested)
      try_failed(what, true);
    else if (ex_->phase == Phase::Transferring)
      fail(what, ExchangeCode::Timeout);
  });
}

void Averager::begin_transfer() {
  const std::size_t bytes = encoded_size(cfg_.wire, n_params_.load());
  ex_->check.emplace(cfg_.wire, n_params_.load());
  ex_->fast_norm = needs_norm() && direct_ && cfg_.wire == kernels::Wire::Fp32;
  ex_->sq = 0;
  const double both_ways = 2.0 * static_cast<double>(bytes + (bytes / cfg_.chunk_bytes + 1) *
                                                                 kChunkHeaderBytes);
  const auto scaled = Millis(static_cast<std::int64_t>(1000.0 * both_ways / cfg_.min_rate_bytes_per_s));
  arm_deadline(cfg_.transfer_timeout_floor + scaled, "timeout:transfer");
  ex_->transfer_started = sched_.now();
  pump_send();
}

bool Averager::all_sent() const { return ex_->own && ex_->sent == ex_->own->chunks.size(); }

std::size_t ChunkSet::ready_count() const { return ready.load(std::memory_order_acquire); }

void Averager::queue_control(std::uint8_t type, net::SharedBytes msg) {
  ex_->control.emplace_back(type, std::move(msg));
  pump_send();
}

// Hands the transport what is due on the exchange connection: control messages (request, accept,
// commit vote) first, then our snapshot's chunks as far as they are cut. The bounded send queue
// may refuse (back-pressure): then we come back shortly, in the same order.
void Averager::pump_send() {
  if (!ex_ || !ex_->conn) return;
  Exchange& e = *ex_;
  if (e.retry) sched_.cancel(e.retry);
  e.retry = 0;
  while (!e.control.empty()) {
    if (!e.conn->send(e.control.front().first, e.control.front().second))
      return retry_send_later(cfg_.send_retry);
    e.control.pop_front();
  }
  if (e.phase != Phase::Transferring) return;
  if (e.own) {
    auto& chunks = e.own->chunks;
    const std::size_t ready = e.own->ready_count();  // the training thread may still be filling
    std::size_t offset = e.sent * cfg_.chunk_bytes;
    const double rate = max_rate_.load();
    while (e.sent < ready) {
      net::Bytes& msg = *chunks[e.sent];
      if (rate > 0) {  // the first chunk at once, then no more than rate bytes per second
        const double due_ms = 1000.0 * static_cast<double>(e.bytes_sent) / rate;
        const double now_ms = static_cast<double>((sched_.now() - e.transfer_started).count());
        if (due_ms > now_ms)
          return retry_send_later(Millis(static_cast<std::int64_t>(std::ceil(due_ms - now_ms))));
      }
      // Not handed to the transport yet, so still ours to write.
      write_chunk_header(msg, e.id, offset);
      if (!e.conn->send(kChunk, chunks[e.sent])) return retry_send_later(cfg_.send_retry);
      offset += msg.size() - kChunkHeaderBytes;
      e.bytes_sent += msg.size();
      if (++e.sent == chunks.size()) spdlog::trace("averager: #{} payload queued", e.seq);
    }
  }
  maybe_commit();
}

void Averager::retry_send_later(Millis after) {
  Exchange& e = *ex_;
  if (!e.conn->is_open()) return;  // on_closed ends the exchange
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t seq = e.seq;
  e.retry = sched_.schedule(after, [this, alive, seq] {
    if (!alive.lock() || !ex_ || ex_->seq != seq) return;
    ex_->retry = 0;
    pump_send();
  });
}

void Averager::on_chunk(const net::ConnectionPtr& c, net::Bytes&& b) {
  auto v = parse_chunk(b);
  if (!v) return violation(c, "malformed chunk");
  if (!is_current(c, v->exchange_id) || ex_->phase != Phase::Transferring || ex_->recv_done)
    return violation(c, "unexpected chunk");
  Exchange& e = *ex_;
  const std::size_t expected = encoded_size(cfg_.wire, n_params_.load());
  if (v->offset != e.received || v->size > expected - e.received) {
    spdlog::warn("averager: chunk from {} at offset {} (+{}) does not fit {} bytes",
                 short_id(e.partner), v->offset, v->size, expected);
    return fail("invalid:length", ExchangeCode::Invalid);
  }
  if (cfg_.wire != kernels::Wire::Int8 && v->size % kernels::wire_value_bytes(cfg_.wire) != 0) {
    spdlog::warn("averager: chunk from {} at offset {} holds a partial value ({} bytes)",
                 short_id(e.partner), v->offset, v->size);
    return fail("invalid:length", ExchangeCode::Invalid);
  }
  if (!e.check->feed(b.data() + kChunkHeaderBytes, v->size)) {
    spdlog::warn("averager: vector from {} refused: a value near offset {} is not finite",
                 short_id(e.partner), v->offset);
    return fail("invalid:non-finite", ExchangeCode::Invalid);
  }
  if (e.fast_norm) fast_norm_chunk(e, b.data() + kChunkHeaderBytes, v->offset, v->size);
  e.received += v->size;
  e.bytes_received += b.size();
  if (e.received == expected) {
    spdlog::trace("averager: #{} payload received", e.seq);
    e.recv_done = true;
  }
  {
    // Handed over as received (no copy here); the training thread uploads the pieces in order at
    // its next step boundary.
    std::lock_guard<std::mutex> lk(mu_);
    if (seq_ == e.seq) {
      incoming_.push_back(std::move(b));
      incoming_complete_ = e.recv_done;
      incoming_norm_ = e.recv_done && needs_norm() && !e.fast_norm;
      if (incoming_norm_) {
        incoming_partner_ = e.partner;
        incoming_at_ = sched_.now();
      }
    }
  }
  // Every value is checked: vote now, unless the norm bounds need the training thread's snapshot.
  if (!e.recv_done) return;
  if (needs_norm() && !e.fast_norm) request_boundary();
  if (!needs_norm()) return validated(e.seq, Verdict{});
  if (e.fast_norm) {
    auto own = [&] { return std::sqrt(fast_own_sq_norm(e)); };
    validated(e.seq, judge(e.partner, std::sqrt(e.sq), own, sched_.now()));
  }
}

void Averager::validated(std::uint64_t seq, const Verdict& v) {
  if (!ex_ || ex_->seq != seq || ex_->phase != Phase::Transferring) return;
  if (!v.reason.empty()) {
    spdlog::warn("averager: vector from {} refused: {} (||r - s|| = {:.4g}, tau = {:.4g})",
                 short_id(ex_->partner), v.reason, v.norm, v.tau);
    return fail(v.reason, v.reason == "anomalous" ? ExchangeCode::Anomalous : ExchangeCode::Invalid);
  }
  ex_->local_valid = true;
  ex_->local_tau = v.tau;
  ex_->local_norm = v.norm;
  queue_control(kValid, encode_valid({ex_->id, v.tau, v.tau > 0 ? v.norm : 0.0}));  // then maybe commits
}

void Averager::on_valid(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = parse_valid(b);
  if (!m) return violation(c, "malformed valid");
  if (!is_current(c, m->exchange_id) || ex_->phase != Phase::Transferring || ex_->peer_valid)
    return violation(c, "unexpected valid");
  // The partner cannot have validated a vector we have not finished sending.
  if (!all_sent()) return violation(c, "valid before our payload");
  ex_->peer_valid = true;
  ex_->peer_tau = m->tau;
  ex_->peer_norm = m->norm;
  spdlog::trace("averager: #{} partner's vote received", ex_->seq);
  maybe_commit();
}

// Both votes are in: the mix is handed to the training thread, and this peer is free for the
// next exchange while it waits for the step boundary that applies it.
void Averager::maybe_commit() {
  if (!ex_ || ex_->phase != Phase::Transferring) return;
  Exchange& e = *ex_;
  // Our vote must have been handed to the transport before we act on theirs.
  if (!e.local_valid || !e.control.empty() || !e.peer_valid || !all_sent()) return;
  if (e.deadline) sched_.cancel(e.deadline);
  if (e.retry) sched_.cancel(e.retry);
  e.deadline = e.retry = 0;
  if (committed_)  // the boundary that applies a mix comes before any later snapshot
    throw std::logic_error("averager: a second exchange committed before the first was applied");
  // The clipping factor from both votes, the same on both sides (min and max commute), so that
  // the exchange still conserves the sum: c = min(1, min(tau_a, tau_b) / max(norm_a, norm_b)).
  // A side that imposes no bound (tau 0) takes the other's.
  double tau = std::numeric_limits<double>::infinity();
  if (e.local_tau > 0) tau = std::min(tau, e.local_tau);
  if (e.peer_tau > 0) tau = std::min(tau, e.peer_tau);
  if (std::isfinite(tau)) {
    e.tau = tau;
    // Both the same on both sides: a side without a bound sent no norm and counts none.
    e.diff_norm = std::max(e.local_tau > 0 ? e.local_norm : 0.0, e.peer_norm);
    e.clip = e.diff_norm > tau ? tau / e.diff_norm : 1.0;
  } else if (needs_norm()) {
    e.diff_norm = e.local_norm;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (seq_ != e.seq) throw std::logic_error("averager: committing an exchange not in flight");
    pending_ = PendingMix{e.seq, static_cast<float>(e.w * e.clip), e.diff_norm, e.local_tau,
                          std::move(incoming_)};
    incoming_.clear();
    incoming_complete_ = incoming_norm_ = false;
    want_snapshot_ = false;
    active_ = false;
    committed_unreported_ = true;
  }
  spdlog::trace("averager: #{} committed", e.seq);
  committed_ = std::move(ex_);
  ex_.reset();
  request_boundary();  // the mix waits for a step boundary
  // Every chunk of ours has reached the partner (it voted): let go of them, so that the snapshot
  // taken right after the mix can reuse their buffers instead of allocating fresh ones.
  committed_->own.reset();
}

void Averager::applied(std::uint64_t seq) {
  if (!committed_ || committed_->seq != seq) return;
  report(*committed_, true, "");
  committed_.reset();
  std::lock_guard<std::mutex> lk(mu_);
  committed_unreported_ = false;
}

void Averager::on_abort(const net::ConnectionPtr& c, const net::Bytes& b) {
  auto m = parse_code(b);
  if (!m) return violation(c, "malformed abort");
  if (committed_ && committed_->conn == c && committed_->id == m->exchange_id) {
    // Inherent commit window: our vote reached them too late. We apply; they do not.
    spdlog::warn("averager: {} aborted after we committed (peer-abort:{})",
                 short_id(committed_->partner), code_name(m->code));
    return;
  }
  if (!is_current(c, m->exchange_id)) return violation(c, "unexpected abort");
  const std::string reason = "peer-abort:" + std::string(code_name(m->code));
  if (ex_->phase == Phase::Transferring) return fail(reason, std::nullopt);
  violation(c, "abort before accept");
}

void Averager::fail(std::string reason, std::optional<ExchangeCode> notify) {
  if (!ex_) return;
  Exchange& e = *ex_;
  if (e.phase == Phase::Transferring && e.conn && e.conn->is_open()) {
    if (notify) e.conn->send(kAbort, encode_code(e.id, *notify));
    own_conns_.erase(e.partner);
    e.conn->close("exchange failed: " + reason);
  }
  const std::string partner = e.partner;
  finish_failed(reason);
  // We refused the partner's vector: counts towards banning it.
  if (reason == "anomalous" || reason.rfind("invalid:", 0) == 0) note_refusal(partner, reason);
}

bool Averager::banned(const std::string& peer) const {
  auto it = bans_.find(peer);
  return it != bans_.end() && sched_.now() < it->second.until;
}

// ban_after refusals within ban_window ban the partner for ban_base * 2^(bans so far), at most
// ban_max: we neither ask it nor answer it, and our exchange connection to it is closed. Bounded:
// a partner's refusal list never holds more than ban_after entries, and past 4096 partners the
// ones neither banned nor recently refused are forgotten.
void Averager::note_refusal(const std::string& partner, const std::string& reason) {
  const RobustConfig& rc = cfg_.robust;
  if (rc.ban_after <= 0 || partner.empty()) return;
  const Millis now = sched_.now();
  if (bans_.size() >= 4096)
    for (auto it = bans_.begin(); it != bans_.end();)
      if (it->second.until <= now && (it->second.refusals.empty() ||
                                      it->second.refusals.back() + rc.ban_window < now))
        it = bans_.erase(it);
      else
        ++it;
  BanState& b = bans_[partner];
  b.refusals.push_back(now);
  while (!b.refusals.empty() && b.refusals.front() + rc.ban_window < now) b.refusals.pop_front();
  if (b.refusals.size() < std::size_t(rc.ban_after)) return;
  b.refusals.clear();
  Millis d = rc.ban_base;
  for (int k = 0; k < b.bans && d < rc.ban_max; ++k) d *= 2;
  d = std::min(d, rc.ban_max);
  ++b.bans;
  b.until = now + d;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.bans;
  }
  spdlog::warn("averager: banning {} for {} s (ban {}): {} refusals of its vector, last {}",
               short_id(partner), d.count() / 1000.0, b.bans, rc.ban_after, reason);
  auto it = own_conns_.find(partner);
  if (it != own_conns_.end() && !(ex_ && ex_->conn == it->second.conn)) {
    auto c = it->second.conn;
    own_conns_.erase(it);
    c->close("exchange partner banned");
  }
  std::weak_ptr<bool> alive = alive_;
  sched_.schedule(d, [this, alive, partner] {
    if (alive.lock() && !banned(partner))
      spdlog::info("averager: ban of {} lifted", short_id(partner));
  });
  if (on_ban_) on_ban_(BanEvent{partner, reason, d, b.bans});
}

void Averager::finish_failed(std::string reason) {
  Exchange& e = *ex_;
  if (e.deadline) sched_.cancel(e.deadline);
  if (e.retry) sched_.cancel(e.retry);
  {
    std::lock_guard<std::mutex> lk(mu_);
    active_ = false;
    want_snapshot_ = false;
    recycle_all(incoming_);
    incoming_complete_ = incoming_norm_ = false;
  }
  report(e, false, reason);
  ex_.reset();
}

void Averager::report(Exchange& e, bool ok, const std::string& reason) {
  ExchangeEvent ev;
  ev.partner = e.partner;
  ev.role = e.role;
  ev.ok = ok;
  ev.reason = reason;
  ev.exchange_id = e.id;
  ev.bytes_sent = e.bytes_sent;
  ev.bytes_received = e.bytes_received;
  ev.ms = static_cast<double>((sched_.now() - e.started).count());
  // How long this partner kept us busy, for the partner choice: a finished exchange, or one that
  // failed once its transfer had begun (a quick BUSY or refusal says nothing about the link).
  if (ok || e.phase == Phase::Transferring)
    choice_.record(e.partner, double((sched_.now() - e.asked).count()), sched_.now());
  ev.w = ok ? e.w : 0.0f;
  ev.diff_norm = ok ? e.diff_norm : -1;
  ev.tau = ok ? e.tau : 0;
  ev.clip = ok ? e.clip : 1;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ok) ++stats_.ok;
    else {
      ++stats_.failed;
      ++stats_.failed_by_reason[reason];
    }
    stats_.bytes_sent += e.bytes_sent;
    stats_.bytes_received += e.bytes_received;
  }
  if (e.role == ExchangeRole::Initiator && !e.partner.empty()) schedule_idle_close(e.partner);
  if (ok)
    spdlog::debug("averager: exchange with {} done as {} in {} ms, w={}", short_id(ev.partner),
                  role_name(ev.role), ev.ms, ev.w);
  else if (reason == "busy")  // routine when many peers gossip at once
    spdlog::debug("averager: every peer asked was busy (last {})", short_id(ev.partner));
  else
    spdlog::info("averager: exchange with {} failed as {}: {}", short_id(ev.partner),
                 role_name(ev.role), reason);
  if (on_event_) on_event_(ev);
}

void Averager::schedule_idle_close(const std::string& peer) {
  auto it = own_conns_.find(peer);
  if (it == own_conns_.end()) return;
  it->second.last_used = sched_.now();
  std::weak_ptr<bool> alive = alive_;
  sched_.schedule(cfg_.idle_close, [this, alive, peer] {
    if (!alive.lock()) return;
    auto it = own_conns_.find(peer);
    if (it == own_conns_.end()) return;
    if (ex_ && ex_->conn == it->second.conn) return;
    if (sched_.now() - it->second.last_used < cfg_.idle_close) return;
    auto c = it->second.conn;
    own_conns_.erase(it);
    c->close("exchange connection idle");
  });
}

bool Averager::is_current(const net::ConnectionPtr& c, std::uint64_t id) const {
  return ex_ && ex_->conn == c && ex_->id == id && id != 0;
}

void Averager::violation(const net::ConnectionPtr& c, const std::string& what) {
  spdlog::warn("averager: protocol violation from {}: {}", short_id(c->peer_id()), what);
  if (ex_ && ex_->conn == c) {
    if (ex_->phase == Phase::Transferring) return fail("protocol", ExchangeCode::Protocol);
    if (ex_->phase == Phase::Requested) return try_failed("protocol", true);
  }
  for (auto it = own_conns_.begin(); it != own_conns_.end(); ++it)
    if (it->second.conn == c) {
      own_conns_.erase(it);
      break;
    }
  c->close("exchange protocol violation: " + what);
}

// ------------------------------------------------------------------------------------------------
// TransportHandler

void Averager::on_connection(const net::ConnectionPtr&, bool) {}

void Averager::on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) {
  switch (type) {
    case kReq: return on_request(c, payload);
    case kAcc: return on_accept(c, payload);
    case kBusy:
    case kRef: return on_busy_or_refuse(c, type, payload);
    case kChunk: return on_chunk(c, std::move(payload));
    case kValid: return on_valid(c, payload);
    case kAbort: return on_abort(c, payload);
    default: return violation(c, "unknown message type " + std::to_string(type));
  }
}

void Averager::on_closed(const net::ConnectionPtr& c, const std::string& reason) {
  for (auto it = own_conns_.begin(); it != own_conns_.end(); ++it)
    if (it->second.conn == c) {
      own_conns_.erase(it);
      break;
    }
  if (!ex_ || ex_->conn != c) return;
  spdlog::debug("averager: exchange connection to {} closed: {}", short_id(ex_->partner), reason);
  if (ex_->phase == Phase::Requested || ex_->phase == Phase::Connecting)
    try_failed("closed", false);
  else if (ex_->phase == Phase::Transferring)
    fail("closed", std::nullopt);
}

}  // namespace gossiptrain::gossip
