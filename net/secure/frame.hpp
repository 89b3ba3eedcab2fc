// Channel framing after the handshake: length-prefixed AEAD frames with counter nonces, messages
// streamed as a start frame + data frames, keepalive, rekey and an explicit close (end of stream).
// Pure code (no sockets) so tests and the fuzzer drive it directly.
//
// Wire frame: header = body length (u32 little-endian) | frame type (u8), sent in clear but
// authenticated as the AEAD's associated data; body = ciphertext | 16-byte tag. The nonce is the
// per-direction frame counter (never sent, never reused: a replayed or dropped frame fails to
// open). Plaintexts by type:
//   Message       msg type | payload              (small messages, one frame)
//   MessageStart  msg type | total length (u64 LE) then Data frames until total is reached
//   Data          chunk of the current message (decrypted straight into the message buffer)
//   Ping          empty (keepalive)
//   Close         reason (explicit end of stream: EOF without it is a truncation)
//   Rekey         empty; the sender's key ratchets after this frame, the receiver's after opening
//   it
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/buffer_pool.hpp"
#include "net/secure/crypto.hpp"
#include "net/secure/crypto_pool.hpp"
#include "net/secure/limits.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

enum class FrameType : std::uint8_t {
  Message = 1,
  MessageStart = 2,
  Data = 3,
  Ping = 4,
  Close = 5,
  Rekey = 6
};
const char* frame_type_name(FrameType t);

inline constexpr std::size_t kFrameHeaderBytes = 5;
inline constexpr std::size_t kMessageStartBytes = 9;
// Messages up to this size travel in one Message frame (one small copy); larger ones are streamed.
inline constexpr std::size_t kSmallMessageBytes = 64 * 1024;
// Crypto threads (crypto_pool.hpp): only data frames of at least this many plaintext bytes are
// handed to a worker (smaller ones cost more to hand over than to open), and one sealing task
// covers consecutive frames of at least this many bytes.
inline constexpr std::size_t kParallelMinFrameBytes = 64 * 1024;
inline constexpr std::size_t kParallelMinTaskBytes = 256 * 1024;
// Messages below this size are sealed and opened on the io thread alone (the default of
// ChannelOptions::parallel_min_message_bytes).
inline constexpr std::size_t kParallelMinMessageBytes = 4u << 20;
// Frames in flight: 2 per crypto thread, at most this many bytes of frames (each way), so that
// large max_frame_bytes settings do not multiply the memory (then fewer threads get work).
inline constexpr std::size_t kParallelMaxInFlightBytes = 32u << 20;
std::size_t parallel_frames_in_flight(unsigned threads, std::size_t frame_bytes);

// Hints the kernel to back [p, p+n) with transparent huge pages (Linux; no-op elsewhere). Used for
// large message buffers, whose first-touch page faults otherwise rival the AEAD in cost.
void advise_huge_pages(void* p, std::size_t n);
inline constexpr std::size_t kHugePageMinBytes = 4u << 20;

struct FrameHeader {
  FrameType type;
  std::uint32_t body_bytes;  // ciphertext + tag
};

void encode_frame_header(std::uint8_t* out, FrameType type, std::uint32_t body_bytes);
// Validates type and per-type plaintext size bounds (never above max_frame_bytes) before anything
// is allocated. False with a reason in `error` on bad input.
bool decode_frame_header(const std::uint8_t* in, std::size_t max_frame_bytes, FrameHeader& out,
                         std::string& error);

// The two ratcheting directions share this key schedule.
crypto::SymKey next_frame_key(const crypto::SymKey& key);

// Sender half: seals frames with a counter nonce and rekeys on schedule.
class FrameSealer {
 public:
  FrameSealer(crypto::Aead aead, const crypto::SymKey& key, const Limits& limits);
  // Wire bytes one seal() call may produce at most (a due rekey frame + the frame).
  std::size_t max_wire_bytes() const;
  // The same bound for a frame of len plaintext bytes (len <= max_frame_bytes).
  static std::size_t wire_bytes_for(std::size_t len);
  // Seals one frame (plaintext `len` bytes, len <= max_frame_bytes) into out; if a rekey is due a
  // Rekey frame is written first. Returns the number of wire bytes written.
  std::size_t seal(FrameType type, const std::uint8_t* plain, std::size_t len, std::uint8_t* out);
  std::uint64_t frames_sealed() const { return total_frames_; }

  // Wire bytes of a batch of `frames` data frames (and a rekey frame before them).
  std::size_t batch_wire_bytes(std::size_t frames) const;
  // The data frames of a streamed message, sealed by crypto threads. Lays out up to `max_frames`
  // Data frames of `chunk` plaintext bytes (the last one shorter) from plain[0, len) into out
  // (batch_wire_bytes(max_frames) bytes): headers, counters and rekey frames exactly as seal()
  // would give them one frame at a time, so the wire is the same byte for byte. The encryption
  // itself is queued on `batch` (empty on entry), in tasks of consecutive frames: out holds the
  // frames only after batch.wait_all(). A batch stops before a rekey that would fall inside it
  // (the queued tasks use the current key). `consumed`: plaintext bytes laid out. Returns the
  // wire bytes.
  std::size_t seal_data_batch(const std::uint8_t* plain, std::size_t len, std::size_t chunk,
                              std::size_t max_frames, std::uint8_t* out, CryptoBatch& batch,
                              std::size_t& consumed);

 private:
  bool rekey_due() const;
  void rekey_into(std::uint8_t* out);
  std::size_t seal_one(FrameType type, const std::uint8_t* plain, std::size_t len,
                       std::uint8_t* out);
  crypto::AeadCipher cipher_;
  crypto::SymKey key_;
  Limits limits_;
  std::uint64_t counter_ = 0;
  std::uint64_t bytes_this_key_ = 0;
  std::uint64_t total_frames_ = 0;
};

// Receiver half: header check, authenticated decryption, message reassembly.
class FrameReceiver {
 public:
  enum class Event { Nothing, Message, Close, Error };

  // Large messages are received into buffers taken from `buffers` (a pool of its own when null).
  FrameReceiver(crypto::Aead aead, const crypto::SymKey& key, const Limits& limits,
                std::shared_ptr<BufferPool> buffers = nullptr);
  ~FrameReceiver();  // waits for the crypto tasks still running
  FrameReceiver(const FrameReceiver&) = delete;
  FrameReceiver& operator=(const FrameReceiver&) = delete;

  // Crypto threads: the data frames (of at least kParallelMinFrameBytes) of messages of at least
  // min_message_bytes are opened by the pool's workers, at most 2 per worker in flight, each with
  // the nonce its place in the stream gives it. The message is delivered once every frame of it
  // has opened; a frame that fails fails the message and the receiver. Control frames inside a
  // message (ping, rekey, close) wait for the frames before them first.
  void set_crypto_pool(std::shared_ptr<CryptoPool> pool, std::size_t min_message_bytes);

  // Step 1: the 5 header bytes. On success body_bytes says how much to read next.
  bool on_header(const std::uint8_t* header, std::size_t& body_bytes, std::string& error);
  // After a successful on_header: a buffer of body_bytes where the body may be read, so that
  // on_body(body_buffer(), n) copies nothing. Valid until the next on_header.
  std::uint8_t* body_buffer() { return body_ptr_; }
  // Step 2: the whole body. Data frames are decrypted directly into the message buffer.
  Event on_body(const std::uint8_t* body, std::size_t len);

  // After Message: the message (moved out). After Close: the reason. After kError: the error.
  std::uint8_t message_type() const { return msg_type_; }
  Bytes take_message() { return std::move(message_); }
  const std::string& text() const { return text_; }
  bool mid_message() const { return in_message_; }

 private:
  Event error(std::string e);
  std::string auth_error(FrameType t, std::uint64_t counter) const;
  bool drain(std::string& err);
  bool pick_body_buffer(std::string& err);
  Event open_parallel(const std::uint8_t* body, std::size_t plen);
  Event on_control(const std::uint8_t* dest, std::size_t plen);
  crypto::AeadCipher cipher_;
  crypto::SymKey key_;
  Limits limits_;
  std::uint64_t counter_ = 0;
  std::uint8_t header_[kFrameHeaderBytes]{};
  FrameHeader hdr_{};
  bool have_header_ = false;
  bool failed_ = false;
  bool in_message_ = false;
  std::uint8_t msg_type_ = 0;
  Bytes message_;
  std::uint64_t filled_ = 0;
  std::uint64_t total_ = 0;
  Bytes scratch_;
  Bytes body_;  // a frame body read on the io thread
  std::uint8_t* body_ptr_ = nullptr;
  std::string text_;
  std::shared_ptr<BufferPool> buffers_;
  // Crypto threads.
  std::shared_ptr<CryptoPool> pool_;
  std::size_t parallel_min_message_ = kParallelMinMessageBytes;
  bool parallel_ = false;                     // the current message's data frames go to the pool
  bool slot_frame_ = false;                   // the frame whose header was read goes to the pool
  std::vector<Bytes> slots_;                  // ring of frame bodies in flight
  std::vector<std::uint64_t> task_counters_;  // the nonce of each queued task
  std::unique_ptr<CryptoBatch> batch_;        // last: destroyed (waited for) before the buffers
};

}  // namespace gossiptrain::net
