// The training thread's exchange buffers, direct and copy paths (see snapshot_buffers.hpp).
#include "gossip/exchange/snapshot_buffers.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "base/assert.hpp"
#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/exchange/relative_wire.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace gossiptrain::gossip {

ChunkSetPtr SnapshotBuffers::take_pool(std::size_t bytes) {
  // Reuse the last snapshot's messages when the protocol thread and the transport let go of them
  // all (only they could still hold references, and they only ever drop them), saving ~100 MB of
  // fresh zeroed pages per exchange.
  bool reuse = pool_ && pool_.use_count() == 1;
  if (reuse)
    for (const auto& c : pool_->chunks) reuse = reuse && c.use_count() == 1;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (!reuse) {
    pool_ = std::make_shared<ChunkSet>();
    for (std::size_t off = 0; off < bytes; off += chunk_bytes_)
      pool_->chunks.push_back(
          std::make_shared<net::Bytes>(kChunkHeaderBytes + std::min(chunk_bytes_, bytes - off)));
    pool_->payload_bytes = bytes;
  }
  pool_->ready.store(0);
  pool_->wire = wire_;
  return pool_;
}

ChunkSetPtr SnapshotBuffers::snapshot(const float* x, std::size_t n,
                                      const std::function<void(const ChunkSetPtr&)>& begun,
                                      const std::function<void(std::size_t k)>& filled) {
  encode_begin(x, n);
  ChunkSetPtr own = take_pool(encoded_size(wire_, n));
  begun(own);
  std::size_t off = 0;
  for (std::size_t k = 0; k < own->chunks.size(); ++k) {
    auto& c = own->chunks[k];
    const std::size_t len = c->size() - kChunkHeaderBytes;
    fill_chunk(c->data() + kChunkHeaderBytes, x, off, len);
    off += len;
    own->ready.store(k + 1, std::memory_order_release);
    filled(k + 1);
  }
  encode_end(x, n);
  return own;
}

kernels::Wire SnapshotBuffers::backend_encoding() const {
  const auto k = backend_wire(wire_);
  GT_ASSERT(k.has_value());  // int4-rel is CopyBuffers::rel_'s, never the backend's
  return *k;
}

void SnapshotBuffers::switch_to(std::uint64_t seq) {
  if (seq == rx_seq_) return;
  rx_seq_ = seq;  // a new exchange: nothing of the partner's vector received yet
  rx_bytes_ = 0;
  reset_received();
}

void SnapshotBuffers::count_received(std::size_t len) {
  if (len > encoded_size(wire_, n_) - rx_bytes_)  // on_chunk refuses such a chunk before
    throw std::logic_error("averager: more bytes handed over than the vector holds");
  rx_bytes_ += len;
}

double SnapshotBuffers::sq_diff() {
  double sq = 0.0;
  for_each_float_span([&](std::size_t, const float* r, const float* s, std::size_t n) {
    sq += be_.sq_diff_norm(r, s, n);
  });
  return sq;
}

double SnapshotBuffers::own_sq_norm() {
  double sq = 0.0;
  for_each_float_span(
      [&](std::size_t, const float*, const float* s, std::size_t n) { sq += sq_norm(s, n); });
  return sq;
}

double SnapshotBuffers::sq_norm(const float* x, std::size_t n) {
  if (zeros_.size() != kScratchValues) zeros_ = kernels::DeviceBuffer<float>(be_, kScratchValues);
  double sq = 0.0;
  for (std::size_t k = 0; k < n; k += kScratchValues)
    sq += be_.sq_diff_norm(x + k, zeros_.data(), std::min(kScratchValues, n - k));
  return sq;
}

namespace {

// Direct mode: our snapshot is read from its chunk messages (pool_, the last snapshot taken:
// every exchange is mixed before the next snapshot), the partner's vector from its chunk messages
// as received (rx_), walking both lists together: their cuts may differ. Every chunk holds whole
// values: ours because chunk_bytes is a multiple of 4, the partner's because on_chunk refuses
// chunks that do not.
class DirectBuffers final : public SnapshotBuffers {
 public:
  using SnapshotBuffers::SnapshotBuffers;
  void allocate(std::size_t n) override {
    n_ = n;
    if (wire_ != WireFormat::Fp32) scratch_.resize(2 * kScratchValues);
  }
  void receive(ChunkList& chunks) override {
    for (auto& c : chunks) {
      count_received(c.size() - kChunkHeaderBytes);
      rx_.push_back(std::move(c));
    }
    chunks.clear();
  }
  bool finish() override {
    if (rx_bytes_ != encoded_size(wire_, n_))
      throw std::logic_error("averager: the partner's vector is incomplete at the end");
    return true;
  }
  void for_each_float_span(const FloatSpanFn& fn) override;
  void release() override {
    for (auto& c : rx_) recycle_(std::move(c));
    rx_.clear();
  }

 protected:
  void encode_begin(const float*, std::size_t) override {}
  void fill_chunk(std::uint8_t* dst, const float* x, std::size_t off, std::size_t len) override {
    if (wire_ == WireFormat::Fp32)
      be_.download(dst, reinterpret_cast<const std::uint8_t*>(x) + off, len);
    else  // element-wise 2-byte values, each chunk holding whole ones
      be_.encode(backend_encoding(), x + off / 2, len / 2, dst);
  }
  void encode_end(const float*, std::size_t) override {}
  void reset_received() override { release(); }

 private:
  // fn(first, r, s, n) over the encoded values [first, first + n) of both message lists.
  template <typename Fn>
  void for_each_span(Fn fn);
  std::vector<float> scratch_;  // fp16 and bf16: r then s, decoded
  ChunkList rx_;                // the partner's chunks taken so far
};

template <typename Fn>
void DirectBuffers::for_each_span(Fn fn) {
  const std::size_t vb = wire_value_bytes(wire_);
  auto values = [vb](const net::Bytes& c) {
    return std::pair{c.data() + kChunkHeaderBytes, (c.size() - kChunkHeaderBytes) / vb};
  };
  std::size_t first = 0, si = 0, ri = 0, so = 0, ro = 0;  // chunk index, and value offset in it
  while (first < n_) {
    if (si == pool_->chunks.size() || ri == rx_.size())
      throw std::logic_error("averager: the chunks do not cover the vector");
    const auto [s, sn] = values(*pool_->chunks[si]);
    const auto [r, rn] = values(rx_[ri]);
    const std::size_t n = std::min(sn - so, rn - ro);
    if (n) fn(first, r + ro * vb, s + so * vb, n);
    first += n;
    so += n;
    ro += n;
    if (so == sn) ++si, so = 0;
    if (ro == rn) ++ri, ro = 0;
  }
}

// fp32 as the messages hold it, fp16 and bf16 decoded a cache-sized block at a time.
void DirectBuffers::for_each_float_span(const FloatSpanFn& fn) {
  for_each_span(
      [&](std::size_t first, const std::uint8_t* r, const std::uint8_t* s, std::size_t n) {
        if (wire_ == WireFormat::Fp32) {
          fn(first, reinterpret_cast<const float*>(r), reinterpret_cast<const float*>(s), n);
          return;
        }
        float* rf = scratch_.data();
        float* sf = scratch_.data() + kScratchValues;
        for (std::size_t k = 0; k < n; k += kScratchValues) {
          const std::size_t m = std::min(kScratchValues, n - k);
          be_.decode(backend_encoding(), r + 2 * k, m, rf);
          be_.decode(backend_encoding(), s + 2 * k, m, sf);
          fn(first + k, rf, sf, m);
        }
      });
}

// The copy path: s_ and r_ on the device. The fp32 encoding is the raw floats: snapshots go
// straight from the parameters into their chunks, received chunks straight into r_. For the
// others, sending and receiving each have their own encoded buffer: the partner's chunks may
// arrive before we encode our snapshot. int4-rel is encoded and decoded on the host (rel_), its
// decoding needing our snapshot.
class CopyBuffers final : public SnapshotBuffers {
 public:
  CopyBuffers(WireFormat wire, std::size_t chunk_bytes, kernels::Backend& be, RecycleFn recycle,
              bool error_feedback)
      : SnapshotBuffers(wire, chunk_bytes, be, std::move(recycle)),
        ef_(error_feedback && wire != WireFormat::Fp32) {
    if (wire == WireFormat::Int4Rel) rel_.emplace();
  }
  void allocate(std::size_t n) override {
    n_ = n;
    s_ = kernels::DeviceBuffer<float>(be_, n);
    r_ = kernels::DeviceBuffer<float>(be_, n);
    if (ef_) {
      e_ = kernels::DeviceBuffer<float>(be_, n);
      y_ = kernels::DeviceBuffer<float>(be_, n);
      zero_ = kernels::DeviceBuffer<float>(be_, n);
      be_.fill(e_.data(), n, 0.0f);
      be_.fill(zero_.data(), n, 0.0f);
    }
    if (rel_) {
      rel_->resize(n);
      for (auto* v : {&hy_, &hs_, &hr_}) v->resize(n);
      for (auto* v : {&henc_, &hrx_}) v->resize(encoded_size(wire_, n));
    } else if (wire_ != WireFormat::Fp32) {
      enc_ = kernels::DeviceBuffer<std::uint8_t>(be_, encoded_size(wire_, n));
      rx_enc_ = kernels::DeviceBuffer<std::uint8_t>(be_, encoded_size(wire_, n));
    }
  }
  void receive(ChunkList& chunks) override;
  // The whole vector is in r_ (decoded) once this returns true.
  bool finish() override {
    if (rx_bytes_ != encoded_size(wire_, n_))
      throw std::logic_error("averager: the partner's vector is incomplete at the end");
    if (rx_decoded_ == n_) return true;
    if (rel_) {
      if (!rel_->decode(hrx_.data(), hs_.data(), hr_.data())) return false;
      be_.upload(r_.data(), hr_.data(), n_ * sizeof(float));
    } else if (is_blockwise(wire_)) {
      be_.decode(backend_encoding(), rx_enc_.data(), n_, r_.data());
    }
    rx_decoded_ = n_;
    return true;
  }
  void observe() override {
    if (rel_ && rx_decoded_ == n_) rel_->observe(hr_.data(), hs_.data());
  }
  void widen() override {
    if (rel_) rel_->widen();
  }
  void widen_all() override {
    if (rel_) rel_->widen_all();
  }
  void for_each_float_span(const FloatSpanFn& fn) override { fn(0, r_.data(), s_.data(), n_); }
  std::vector<float> residual() const override {
    std::vector<float> v(ef_ ? n_ : 0);
    if (!v.empty()) be_.download(v.data(), e_.data(), n_ * sizeof(float));
    return v;
  }
  void set_residual(const std::vector<float>& v) override {
    if (!ef_ || v.size() != n_) return;
    be_.upload(e_.data(), v.data(), n_ * sizeof(float));
  }

 protected:
  void encode_begin(const float* x, std::size_t n) override {
    src_ = reinterpret_cast<const std::uint8_t*>(x);
    if (wire_ == WireFormat::Fp32) return;
    if (ef_) {  // y = x + e: what would have been sent, with what the last snapshots rounded off
      be_.copy(y_.data(), x, n * sizeof(float));
      be_.mix(y_.data(), e_.data(), zero_.data(), n, 1.0f);
      x = y_.data();
    }
    if (rel_) {  // on the host; s_ gets what it decodes to at the end
      be_.download(hy_.data(), x, n * sizeof(float));
      rel_->encode(hy_.data(), henc_.data(), hs_.data());
      return;
    }
    be_.encode(backend_encoding(), x, n, enc_.data());
    src_ = enc_.data();
  }
  void fill_chunk(std::uint8_t* dst, const float*, std::size_t off, std::size_t len) override {
    if (rel_) std::memcpy(dst, henc_.data() + off, len);
    else be_.download(dst, src_ + off, len);
  }
  void encode_end(const float* x, std::size_t n) override {
    if (wire_ == WireFormat::Fp32) be_.copy(s_.data(), x, n * sizeof(float));
    else if (rel_) be_.upload(s_.data(), hs_.data(), n * sizeof(float));
    else be_.decode(backend_encoding(), enc_.data(), n, s_.data());
    if (ef_) {  // e = y - s: exact where s is y rounded to nearest (within a factor 2 of y)
      be_.copy(e_.data(), y_.data(), n * sizeof(float));
      be_.mix(e_.data(), zero_.data(), s_.data(), n, 1.0f);
    }
  }
  void reset_received() override { rx_decoded_ = 0; }

 private:
  kernels::DeviceBuffer<float> s_, r_;
  bool ef_ = false;                          // error feedback (a lossy wire only)
  kernels::DeviceBuffer<float> e_, y_, zero_;  // its residual, x + e, and zeros for mix()
  kernels::DeviceBuffer<std::uint8_t> enc_;     // our encoded snapshot (not for fp32)
  kernels::DeviceBuffer<std::uint8_t> rx_enc_;  // the partner's encoded vector (not for fp32)
  const std::uint8_t* src_ = nullptr;           // what the chunks are filled from
  std::size_t rx_decoded_ = 0;  // values decoded into r_ (fp16, bf16, the blockwise wires)
  // int4-rel: the codec, and on the host x (+ e), s, r, our encoding and the partner's.
  std::optional<RelativeWire> rel_;
  std::vector<float> hy_, hs_, hr_;
  std::vector<std::uint8_t> henc_, hrx_;
};

// Uploads the chunks (and decodes the complete values of the element-wise wires on the way, so
// neither the upload nor the decode of a 100 MB vector trails the transfer), then gives their
// buffers back. int8, int4 and int2 keep their block scales at the front, so they are decoded
// whole at the end.
void CopyBuffers::receive(ChunkList& chunks) {
  std::uint8_t* dst =
      wire_ == WireFormat::Fp32 ? reinterpret_cast<std::uint8_t*>(r_.data()) : rx_enc_.data();
  for (auto& c : chunks) {
    const std::size_t len = c.size() - kChunkHeaderBytes;
    const std::size_t at = rx_bytes_;
    count_received(len);
    if (rel_) std::memcpy(hrx_.data() + at, c.data() + kChunkHeaderBytes, len);
    else be_.upload(dst + at, c.data() + kChunkHeaderBytes, len);
    recycle_(std::move(c));
  }
  chunks.clear();
  if (wire_ == WireFormat::Fp16 || wire_ == WireFormat::Bf16) {
    const std::size_t ready = rx_bytes_ / 2;
    if (ready > rx_decoded_)
      be_.decode(backend_encoding(), rx_enc_.data() + rx_decoded_ * 2, ready - rx_decoded_,
                 r_.data() + rx_decoded_);
    rx_decoded_ = ready;
  }
}

}  // namespace

std::unique_ptr<SnapshotBuffers> SnapshotBuffers::make(bool direct, WireFormat wire,
                                                       std::size_t chunk_bytes,
                                                       kernels::Backend& be, RecycleFn recycle,
                                                       bool error_feedback) {
  if (direct && error_feedback)
    throw std::invalid_argument("averager: error feedback takes the copy path, not the direct one");
  if (direct) return std::make_unique<DirectBuffers>(wire, chunk_bytes, be, std::move(recycle));
  return std::make_unique<CopyBuffers>(wire, chunk_bytes, be, std::move(recycle), error_feedback);
}

bool add_sq_diff(kernels::Backend& be, const ChunkSet* own, std::size_t chunk_bytes,
                 const std::uint8_t* r, std::size_t offset, std::size_t size, double& sq) {
  if (!own || std::min(own->ready_count() * chunk_bytes, own->payload_bytes) < offset + size)
    return false;
  while (size > 0) {
    const std::size_t k = offset / chunk_bytes, within = offset % chunk_bytes;
    const net::Bytes& c = *own->chunks[k];
    const std::size_t m = std::min(size, c.size() - kChunkHeaderBytes - within);
    const auto* a = reinterpret_cast<const float*>(r);
    const auto* b = reinterpret_cast<const float*>(c.data() + kChunkHeaderBytes + within);
    sq += be.host_memory() ? be.sq_diff_norm(a, b, m / sizeof(float))
                           : kernels::host_sq_diff_norm(a, b, m / sizeof(float));
    r += m;
    offset += m;
    size -= m;
  }
  return true;
}

double own_sq_norm(kernels::Backend& be, const ChunkSet& own, std::vector<float>& zeros) {
  constexpr std::size_t kBlock = 16384;
  if (zeros.size() != kBlock) zeros.assign(kBlock, 0.0f);
  double sq = 0.0;
  for (const auto& c : own.chunks) {
    const float* x = reinterpret_cast<const float*>(c->data() + kChunkHeaderBytes);
    const std::size_t n = (c->size() - kChunkHeaderBytes) / sizeof(float);
    for (std::size_t k = 0; k < n; k += kBlock)
      sq += be.host_memory() ? be.sq_diff_norm(x + k, zeros.data(), std::min(kBlock, n - k))
                             : kernels::host_sq_diff_norm(x + k, zeros.data(), std::min(kBlock, n - k));
  }
  return sq;
}

}  // namespace gossiptrain::gossip
