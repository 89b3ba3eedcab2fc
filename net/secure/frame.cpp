// Frame sealing, checking, decryption and message reassembly (see frame.hpp for the format).
#include "net/secure/frame.hpp"
#include "base/bytes.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

namespace gossiptrain::net {
namespace {

// Plaintext size bounds per frame type; max_frame_bytes bounds the variable ones.
bool plain_size_ok(FrameType t, std::size_t p, std::size_t max_frame) {
  switch (t) {
    case FrameType::Message: return p >= 1 && p <= max_frame;
    case FrameType::MessageStart: return p == kMessageStartBytes;
    case FrameType::Data: return p >= 1 && p <= max_frame;
    case FrameType::Ping: return p == 0;
    case FrameType::Rekey: return p == 0;
    case FrameType::Close: return p <= kMaxCloseReasonBytes;
  }
  return false;
}

}  // namespace

void advise_huge_pages(void* p, std::size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHugePageBytes = 2u << 20;
  auto a = (reinterpret_cast<std::uintptr_t>(p) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  auto e = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(kHugePageBytes - 1);
  if (e > a) ::madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE);  // a hint: errors ignored
#else
  (void)p;
  (void)n;
#endif
}

const char* frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::Message: return "message";
    case FrameType::MessageStart: return "message-start";
    case FrameType::Data: return "data";
    case FrameType::Ping: return "ping";
    case FrameType::Close: return "close";
    case FrameType::Rekey: return "rekey";
  }
  return "unknown";
}

void encode_frame_header(std::uint8_t* out, FrameType type, std::uint32_t body_bytes) {
  base::put_u32(out, body_bytes);
  out[4] = static_cast<std::uint8_t>(type);
}

bool decode_frame_header(const std::uint8_t* in, std::size_t max_frame_bytes, FrameHeader& out,
                         std::string& error) {
  const std::uint32_t len = base::get_u32(in);
  std::uint8_t t = in[4];
  if (t < 1 || t > 6) {
    error = "unknown frame type " + std::to_string(t);
    return false;
  }
  if (len < crypto::kAeadTagBytes ||
      !plain_size_ok(FrameType(t), len - crypto::kAeadTagBytes, max_frame_bytes)) {
    error = std::string("bad length ") + std::to_string(len) + " for " +
            frame_type_name(FrameType(t)) + " frame";
    return false;
  }
  out = FrameHeader{FrameType(t), len};
  return true;
}

crypto::SymKey next_frame_key(const crypto::SymKey& key) { return crypto::kdf(key, "frame rekey"); }

// ---- FrameSealer ----

FrameSealer::FrameSealer(crypto::Aead aead, const crypto::SymKey& key, const Limits& limits)
    : cipher_(aead, key), key_(key), limits_(limits) {}

std::size_t FrameSealer::wire_bytes_for(std::size_t len) {
  return 2 * (kFrameHeaderBytes + crypto::kAeadTagBytes) + len;
}

std::size_t FrameSealer::max_wire_bytes() const { return wire_bytes_for(limits_.max_frame_bytes); }

std::size_t FrameSealer::seal_one(FrameType type, const std::uint8_t* plain, std::size_t len,
                                  std::uint8_t* out) {
  // Invariant, not input: the rekey schedule keeps the counter far below the nonce space.
  if (counter_ >= kMaxFramesPerKey) throw std::logic_error("frame counter exhausted");
  std::uint32_t body = static_cast<std::uint32_t>(len + crypto::kAeadTagBytes);
  encode_frame_header(out, type, body);
  cipher_.seal(out + kFrameHeaderBytes, out + kFrameHeaderBytes + len, plain, len,
               std::span<const std::uint8_t>(out, kFrameHeaderBytes), counter_);
  ++counter_;
  ++total_frames_;
  bytes_this_key_ += len;
  return kFrameHeaderBytes + body;
}

bool FrameSealer::rekey_due() const {
  return counter_ >= limits_.rekey_after_frames || bytes_this_key_ >= limits_.rekey_after_bytes;
}

void FrameSealer::rekey_into(std::uint8_t* out) {
  seal_one(FrameType::Rekey, nullptr, 0, out);
  key_ = next_frame_key(key_);
  cipher_.set_key(key_);
  counter_ = 0;
  bytes_this_key_ = 0;
}

std::size_t FrameSealer::seal(FrameType type, const std::uint8_t* plain, std::size_t len,
                              std::uint8_t* out) {
  if (len > limits_.max_frame_bytes) throw std::logic_error("frame larger than max_frame_bytes");
  std::size_t n = 0;
  if (rekey_due()) {
    rekey_into(out);
    n = kFrameHeaderBytes + crypto::kAeadTagBytes;
  }
  return n + seal_one(type, plain, len, out + n);
}

std::size_t parallel_frames_in_flight(unsigned threads, std::size_t frame_bytes) {
  std::size_t task_frames =
      (kParallelMinTaskBytes + frame_bytes - 1) / std::max<std::size_t>(frame_bytes, 1);
  std::size_t want = 2 * std::size_t(threads) * task_frames;
  std::size_t cap =
      std::max<std::size_t>(2, kParallelMaxInFlightBytes / std::max<std::size_t>(frame_bytes, 1));
  return std::min(want, cap);
}

std::size_t FrameSealer::batch_wire_bytes(std::size_t frames) const {
  return (frames + 1) * (kFrameHeaderBytes + crypto::kAeadTagBytes) +
         frames * limits_.max_frame_bytes;
}

namespace {

// One sealing task: `frames` consecutive Data frames laid out at `out` (headers already written),
// plaintext chunks of `chunk` bytes (the last `last` bytes), nonces counter, counter + 1, ...
struct SealRun {
  const crypto::AeadCipher* cipher;
  std::uint8_t* out;
  const std::uint8_t* plain;
  std::size_t frames, chunk, last;
  std::uint64_t counter;
  bool operator()() const {
    std::uint8_t* o = out;
    const std::uint8_t* p = plain;
    for (std::size_t i = 0; i < frames; ++i) {
      std::size_t len = i + 1 == frames ? last : chunk;
      cipher->seal(o + kFrameHeaderBytes, o + kFrameHeaderBytes + len, p, len,
                   std::span<const std::uint8_t>(o, kFrameHeaderBytes), counter + i);
      o += kFrameHeaderBytes + len + crypto::kAeadTagBytes;
      p += len;
    }
    return true;
  }
};

}  // namespace

std::size_t FrameSealer::seal_data_batch(const std::uint8_t* plain, std::size_t len,
                                         std::size_t chunk, std::size_t max_frames,
                                         std::uint8_t* out, CryptoBatch& batch,
                                         std::size_t& consumed) {
  if (chunk == 0 || chunk > limits_.max_frame_bytes || batch.size() != 0)
    throw std::logic_error("seal_data_batch misuse");
  std::size_t wire = 0;
  consumed = 0;
  if (len > 0 && rekey_due()) {  // no task is queued yet: the key may change
    rekey_into(out);
    wire = kFrameHeaderBytes + crypto::kAeadTagBytes;
  }
  SealRun run{&cipher_, out + wire, plain, 0, chunk, 0, counter_};
  for (std::size_t f = 0; f < max_frames && consumed < len; ++f) {
    if (f > 0 && rekey_due()) break;  // the next batch starts with the rekey
    if (counter_ >= kMaxFramesPerKey) throw std::logic_error("frame counter exhausted");
    std::size_t n = std::min(chunk, len - consumed);
    encode_frame_header(out + wire, FrameType::Data,
                        static_cast<std::uint32_t>(n + crypto::kAeadTagBytes));
    ++run.frames;
    run.last = n;
    wire += kFrameHeaderBytes + n + crypto::kAeadTagBytes;
    consumed += n;
    ++counter_;
    ++total_frames_;
    bytes_this_key_ += n;
    if ((run.frames - 1) * chunk + n >= kParallelMinTaskBytes) {
      batch.add(run);
      run = SealRun{&cipher_, out + wire, plain + consumed, 0, chunk, 0, counter_};
    }
  }
  if (run.frames > 0) batch.add(run);
  return wire;
}

// ---- FrameReceiver ----

FrameReceiver::FrameReceiver(crypto::Aead aead, const crypto::SymKey& key, const Limits& limits,
                             std::shared_ptr<BufferPool> buffers)
    : cipher_(aead, key),
      key_(key),
      limits_(limits),
      buffers_(buffers ? std::move(buffers) : std::make_shared<BufferPool>()) {}

FrameReceiver::~FrameReceiver() {
  if (batch_) batch_->wait_all();
}

void FrameReceiver::set_crypto_pool(std::shared_ptr<CryptoPool> pool,
                                    std::size_t min_message_bytes) {
  if (in_message_ || (batch_ && batch_->size() > 0))
    throw std::logic_error("set_crypto_pool inside a message");
  batch_.reset();
  slots_.clear();
  pool_ = std::move(pool);
  parallel_min_message_ = min_message_bytes;
}

FrameReceiver::Event FrameReceiver::error(std::string e) {
  if (batch_) batch_->wait_all();  // no task may still write into the message
  task_counters_.clear();
  failed_ = true;
  text_ = std::move(e);
  message_ = Bytes();
  return Event::Error;
}

std::string FrameReceiver::auth_error(FrameType t, std::uint64_t counter) const {
  return std::string("frame authentication failed (") + frame_type_name(t) + " frame " +
         std::to_string(counter) + ")";
}

// Waits for every queued frame; false (the first failed frame in err) when one did not open.
bool FrameReceiver::drain(std::string& err) {
  if (!batch_ || batch_->size() == 0) return true;
  std::size_t bad = 0;
  bool ok = batch_->wait_all(&bad);
  if (!ok) err = auth_error(FrameType::Data, task_counters_.at(bad));
  task_counters_.clear();
  return ok;
}

// Where the body of the frame whose header was just read goes: a slot of the ring for a frame
// the pool opens (once the frame that last used that slot has opened), else body_.
bool FrameReceiver::pick_body_buffer(std::string& err) {
  std::size_t plen = hdr_.body_bytes - crypto::kAeadTagBytes;
  slot_frame_ = parallel_ && hdr_.type == FrameType::Data && plen >= kParallelMinFrameBytes;
  if (!slot_frame_) {
    if (body_.size() < hdr_.body_bytes) body_.resize(hdr_.body_bytes);  // <= max frame + tag
    body_ptr_ = body_.data();
    return true;
  }
  if (!batch_) batch_ = std::make_unique<CryptoBatch>(pool_);
  if (slots_.empty())
    slots_.resize(parallel_frames_in_flight(pool_->threads(), limits_.max_frame_bytes));
  std::size_t task = batch_->size();
  if (task >= slots_.size() && !batch_->wait(task - slots_.size())) {
    err = auth_error(FrameType::Data, task_counters_.at(task - slots_.size()));
    return false;
  }
  Bytes& slot = slots_[task % slots_.size()];
  if (slot.size() < hdr_.body_bytes) slot.resize(limits_.max_frame_bytes + crypto::kAeadTagBytes);
  body_ptr_ = slot.data();
  return true;
}

bool FrameReceiver::on_header(const std::uint8_t* header, std::size_t& body_bytes,
                              std::string& err) {
  if (failed_ || have_header_) {
    err = "frame receiver misuse";
    return false;
  }
  if (!decode_frame_header(header, limits_.max_frame_bytes, hdr_, err)) {
    error(err);
    return false;
  }
  // Sequencing is checked before reading the body: data only inside a message, no new message
  // inside one.
  bool data = hdr_.type == FrameType::Data;
  bool starts = hdr_.type == FrameType::Message || hdr_.type == FrameType::MessageStart;
  if ((data && !in_message_) || (starts && in_message_)) {
    err = std::string("unexpected ") + frame_type_name(hdr_.type) + " frame";
    error(err);
    return false;
  }
  if (data && hdr_.body_bytes - crypto::kAeadTagBytes > total_ - filled_) {
    err = "data frame overruns the announced message length";
    error(err);
    return false;
  }
  if (counter_ >= kMaxFramesPerKey) {
    err = "remote exceeded the frame limit of one key";
    error(err);
    return false;
  }
  // A control frame inside a message is handled after the frames before it have opened (a
  // rekey changes the key the queued tasks use).
  if ((!data && !drain(err)) || !pick_body_buffer(err)) {
    error(err);
    return false;
  }
  std::memcpy(header_, header, kFrameHeaderBytes);
  have_header_ = true;
  body_bytes = hdr_.body_bytes;
  return true;
}

// A data frame of a parallel message: queued with its nonce and header; the message is complete
// (and delivered) once every queued frame has opened.
FrameReceiver::Event FrameReceiver::open_parallel(const std::uint8_t* body, std::size_t plen) {
  if (body != body_ptr_) std::memcpy(body_ptr_, body, plen + crypto::kAeadTagBytes);
  // Within the capacity reserved at the start: nothing moves under the queued tasks.
  if (message_.capacity() < filled_ + plen) throw std::logic_error("message buffer too small");
  message_.resize(filled_ + plen);
  std::array<std::uint8_t, kFrameHeaderBytes> ad;
  std::memcpy(ad.data(), header_, kFrameHeaderBytes);
  const crypto::AeadCipher* c = &cipher_;
  std::uint8_t* dest = message_.data() + filled_;
  const std::uint8_t* src = body_ptr_;
  std::uint64_t counter = counter_;
  batch_->add([c, dest, src, plen, ad, counter] {
    return c->open(dest, src, plen, src + plen, ad, counter);
  });
  task_counters_.push_back(counter_);
  ++counter_;
  filled_ += plen;
  if (filled_ < total_) return Event::Nothing;
  std::string err;
  if (!drain(err)) return error(err);
  in_message_ = false;
  return Event::Message;
}

FrameReceiver::Event FrameReceiver::on_body(const std::uint8_t* body, std::size_t len) {
  if (failed_ || !have_header_ || len != hdr_.body_bytes) return error("frame receiver misuse");
  have_header_ = false;
  std::size_t plen = len - crypto::kAeadTagBytes;
  if (slot_frame_) return open_parallel(body, plen);
  const std::uint8_t* tag = body + plen;
  std::span<const std::uint8_t> ad(header_, kFrameHeaderBytes);
  std::uint8_t* dest;
  if (hdr_.type == FrameType::Data) {
    // The buffer was reserved at the start; growing it frame by frame touches (faults in and
    // zeroes) each part just before the decryption writes it, while it is hot in cache.
    message_.resize(filled_ + plen);
    dest = message_.data() + filled_;
  } else {
    if (scratch_.size() < plen) scratch_.resize(plen);
    dest = scratch_.data();
  }
  if (!cipher_.open(dest, body, plen, tag, ad, counter_))
    return error(auth_error(hdr_.type, counter_));
  ++counter_;
  if (hdr_.type != FrameType::Data) return on_control(dest, plen);
  filled_ += plen;
  if (filled_ < total_) return Event::Nothing;
  std::string err;
  if (!drain(err)) return error(err);  // frames of this message that the pool opened
  in_message_ = false;
  return Event::Message;
}

// Every frame but Data, once opened (plaintext at dest).
FrameReceiver::Event FrameReceiver::on_control(const std::uint8_t* dest, std::size_t plen) {
  switch (hdr_.type) {
    case FrameType::Message:
      msg_type_ = dest[0];
      message_.assign(dest + 1, dest + plen);
      return Event::Message;
    case FrameType::MessageStart: {
      const std::uint64_t total = base::get_u64(dest + 1);
      if (total > limits_.max_message_bytes)
        return error("announced message of " + std::to_string(total) +
                     " bytes exceeds the limit of " + std::to_string(limits_.max_message_bytes));
      msg_type_ = dest[0];
      // The one allocation of the message, bounded above; a recycled buffer when the pool has
      // one (its pages already mapped). Page faults of a fresh buffer cost about as much as the
      // decryption: use huge pages for the big ones.
      message_ = buffers_->take(total);
      if (total >= kHugePageMinBytes) advise_huge_pages(message_.data(), total);
      total_ = total;
      filled_ = 0;
      parallel_ = pool_ && pool_->threads() > 1 && total >= parallel_min_message_;
      if (total == 0) return Event::Message;
      in_message_ = true;
      return Event::Nothing;
    }
    case FrameType::Ping: return Event::Nothing;
    case FrameType::Rekey:
      key_ = next_frame_key(key_);
      cipher_.set_key(key_);
      counter_ = 0;
      return Event::Nothing;
    case FrameType::Close:
      text_.assign(reinterpret_cast<const char*>(dest), plen);
      for (char& c : text_)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
      failed_ = true;  // nothing may follow the end of the stream
      return Event::Close;
    case FrameType::Data: break;
  }
  return error("unknown frame type");
}

}  // namespace gossiptrain::net
