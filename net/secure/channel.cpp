// The Asio session of one encrypted connection (see channel.hpp for the shape and error policy).
#include "net/secure/channel.hpp"
#include "base/bytes.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include <spdlog/spdlog.h>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace gossiptrain::net {

// A connection idle for a keepalive interval keeps at most this much of its sealed-frame buffer.
constexpr std::size_t kIdleWireKeepBytes = 2 * kSmallMessageBytes;
namespace {

constexpr auto kUseTuple = asio::experimental::as_tuple(asio::use_awaitable);

// Exceptions out of a session coroutine are bugs (remote input never throws): let them surface.
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

std::string io_reason(const std::error_code& ec, const char* where) {
  if (ec == asio::error::eof) return std::string("connection closed by remote ") + where;
  return ec.message() + " " + where;
}

}  // namespace

Channel::Channel(std::shared_ptr<asio::io_context> io, asio::ip::tcp::socket socket, bool inbound,
                 std::shared_ptr<const ChannelOptions> opts, ChannelHost& host)
    : io_(std::move(io)),
      socket_(std::move(socket)),
      inbound_(inbound),
      opts_(std::move(opts)),
      host_(host),
      watchdog_timer_(socket_.get_executor()),
      writer_signal_(socket_.get_executor()) {
  std::error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) {
    auto a = ep.address();
    remote_addr_ =
        (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
  } else {
    remote_addr_ = "?";
  }
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
}

Channel::~Channel() = default;

void Channel::start(Clock::time_point handshake_deadline) {
  deadline_ = handshake_deadline;
  deadline_reason_ = CloseCause{CloseReason::Timeout, "handshake"};
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), watchdog(), rethrow);
  asio::co_spawn(socket_.get_executor(), run(), rethrow);
}

void Channel::set_deadline(Clock::time_point t, CloseCause reason) {
  bool earlier = t < deadline_;
  deadline_ = t;
  deadline_reason_ = std::move(reason);
  if (earlier) watchdog_timer_.cancel();  // the watchdog re-arms for the new deadline
}

asio::awaitable<void> Channel::watchdog() {
  auto self = shared_from_this();
  while (!closed_) {
    if (Clock::now() >= deadline_) {
      fail(deadline_reason_);
      co_return;
    }
    watchdog_timer_.expires_at(deadline_);
    co_await watchdog_timer_.async_wait(kUseTuple);
  }
}

asio::awaitable<bool> Channel::write_all(const std::uint8_t* data, std::size_t n) {
  auto [ec, written] = co_await asio::async_write(socket_, asio::buffer(data, n), kUseTuple);
  if (ec) {
    fail(CloseCause{CloseReason::IoError,
                    io_reason(ec, established_ ? "while writing" : "during handshake"),
                    !established_});
    co_return false;
  }
  last_tx_ = Clock::now();
  co_return true;
}

asio::awaitable<void> Channel::run() {
  auto self = shared_from_this();
  Handshake hs(inbound_ ? Handshake::Role::Responder : Handshake::Role::Initiator,
               opts_->handshake);
  if (!inbound_) {
    Bytes m1 = hs.start();
    if (!co_await write_all(m1.data(), m1.size())) co_return;
  }
  Bytes buf;
  while (!hs.done() && !hs.failed()) {
    buf.resize(hs.expected_bytes());  // fixed per step, at most Handshake::kM3Bytes
    auto [ec, got] = co_await asio::async_read(socket_, asio::buffer(buf), kUseTuple);
    if (closed_) co_return;
    if (ec) {
      peer_id_ = hs.remote_peer_id();
      fail(CloseCause{CloseReason::HandshakeFailed, io_reason(ec, "during handshake"), true});
      co_return;
    }
    Bytes out = hs.on_message(buf);
    if (!out.empty() && !co_await write_all(out.data(), out.size())) co_return;
  }
  peer_id_ = hs.remote_peer_id();
  if (hs.failed()) {
    remote_listen_addr_ = hs.remote_listen_addr();
    fail(CloseCause{hs.close_reason(), hs.error()});
    co_return;
  }
  HandshakeResult r = hs.take_result();
  remote_listen_addr_ = r.remote_listen_addr;
  aead_ = r.aead;
  sealer_ = std::make_unique<FrameSealer>(r.aead, r.send_key, opts_->limits);
  receiver_ = std::make_unique<FrameReceiver>(r.aead, r.recv_key, opts_->limits, opts_->buffers);
  if (opts_->crypto_pool && opts_->crypto_pool->threads() > 1)
    receiver_->set_crypto_pool(opts_->crypto_pool, opts_->parallel_min_message_bytes);
  established_ = true;
  last_tx_ = Clock::now();
  set_deadline(Clock::now() + opts_->limits.idle_timeout, CloseCause{CloseReason::Timeout, "idle"});
  watchdog_timer_.cancel();  // the idle deadline may be later than the handshake one: re-arm
  spdlog::debug("net: {} {} established ({}, {})", peer_id_, remote_addr_,
                inbound_ ? "inbound" : "outbound", crypto::aead_name(aead_));
  host_.channel_established(self);
  if (closed_) co_return;
  asio::co_spawn(socket_.get_executor(), writer(), rethrow);
  co_await reader();
}

asio::awaitable<void> Channel::reader() {
  auto self = shared_from_this();
  std::uint8_t header[kFrameHeaderBytes];
  for (;;) {
    auto [ec, n] = co_await asio::async_read(socket_, asio::buffer(header), kUseTuple);
    if (closed_) co_return;
    if (ec) {
      if (ec != asio::error::eof)
        fail(CloseCause{CloseReason::IoError, io_reason(ec, "while reading")});
      else if (closing_) fail(close_reason_);  // the remote finished after our close frame
      else
        fail(CloseCause{CloseReason::Truncated, receiver_->mid_message()
                                                    ? "EOF inside a message"
                                                    : "EOF without a close frame"});
      co_return;
    }
    std::size_t body_bytes = 0;
    std::string err;
    if (!receiver_->on_header(header, body_bytes, err)) {
      fail(CloseCause{CloseReason::FrameError, err});
      co_return;
    }
    // The receiver's buffer (<= max_frame_bytes + tag): its own, or a slot of the crypto threads.
    std::uint8_t* body = receiver_->body_buffer();
    auto [ec2, n2] = co_await asio::async_read(socket_, asio::buffer(body, body_bytes), kUseTuple);
    if (closed_) co_return;
    if (ec2) {
      fail(ec2 == asio::error::eof
               ? CloseCause{CloseReason::Truncated, "EOF inside a frame"}
               : CloseCause{CloseReason::IoError, io_reason(ec2, "while reading")});
      co_return;
    }
    auto ev = receiver_->on_body(body, body_bytes);
    if (!closing_)
      set_deadline(Clock::now() + opts_->limits.idle_timeout,
                   CloseCause{CloseReason::Timeout, "idle"});
    switch (ev) {
      case FrameReceiver::Event::Nothing: break;
      case FrameReceiver::Event::Message:
        if (!closing_)
          host_.channel_message(self, receiver_->message_type(), receiver_->take_message());
        break;
      case FrameReceiver::Event::Close:
        fail(closing_ ? close_reason_ : CloseCause{CloseReason::RemoteClosed, receiver_->text()});
        co_return;
      case FrameReceiver::Event::Error:
        fail(CloseCause{CloseReason::FrameError, receiver_->text()});
        co_return;
    }
    if (closed_) co_return;
  }
}

asio::awaitable<bool> Channel::send_frame(FrameType type, const std::uint8_t* plain,
                                          std::size_t len) {
  // The sealed-frame buffer grows to the largest frame this connection has sent: membership
  // connections (a hundred per peer in a large swarm) never hold the 1 MiB a data frame needs.
  const std::size_t need = FrameSealer::wire_bytes_for(len);
  if (wire_.size() < need) wire_.resize(need);
  std::size_t n = sealer_->seal(type, plain, len, wire_.data());
  co_return co_await write_all(wire_.data(), n);
}

asio::awaitable<bool> Channel::send_message(const Outgoing& m) {
  const Bytes& p = *m.payload;
  std::size_t max_small = std::min(kSmallMessageBytes, opts_->limits.max_frame_bytes);
  if (p.size() + 1 <= max_small) {
    small_.resize(p.size() + 1);
    small_[0] = m.type;
    if (!p.empty()) std::memcpy(small_.data() + 1, p.data(), p.size());
    co_return co_await send_frame(FrameType::Message, small_.data(), small_.size());
  }
  std::uint8_t start[kMessageStartBytes];
  start[0] = m.type;
  base::put_u64(start + 1, p.size());
  if (!co_await send_frame(FrameType::MessageStart, start, sizeof start)) co_return false;
  const auto& pool = opts_->crypto_pool;
  if (pool && pool->threads() > 1 && p.size() >= opts_->parallel_min_message_bytes)
    co_return co_await send_data_parallel(p);
  std::size_t chunk = opts_->limits.max_frame_bytes;
  for (std::size_t off = 0; off < p.size(); off += chunk) {
    if (closed_) co_return false;
    if (closing_ && !flush_) co_return true;  // shutdown: the close frame follows mid-message
    std::size_t len = std::min(chunk, p.size() - off);
    if (!co_await send_frame(FrameType::Data, p.data() + off, len)) co_return false;
  }
  co_return true;
}

// The data frames of a large message, sealed by the crypto threads: while one batch of frames is
// written, the workers seal the next. The sealer gives every frame its counter in order as it
// lays the batch out; everything laid out is written, so the counters stay in step with the
// receiver even when a shutdown cuts the message short.
asio::awaitable<bool> Channel::send_data_parallel(const Bytes& p) {
  CryptoBatch batch(opts_->crypto_pool);  // its destructor waits for the tasks on every exit
  const std::size_t chunk = opts_->limits.max_frame_bytes;
  const std::size_t frames = parallel_frames_in_flight(batch.pool().threads(), chunk);
  const std::size_t wire_bytes = sealer_->batch_wire_bytes(frames);
  for (Bytes& b : batch_wire_)
    if (b.size() < wire_bytes) b.resize(wire_bytes);
  if (closed_) co_return false;
  if (closing_ && !flush_) co_return true;  // shutdown: the close frame follows mid-message
  std::size_t used = 0;
  int cur = 0;
  std::size_t n = sealer_->seal_data_batch(p.data(), p.size(), chunk, frames,
                                           batch_wire_[cur].data(), batch, used);
  std::size_t off = used;
  if (!batch.wait_all()) throw std::logic_error("crypto threads: sealing failed");
  while (n > 0) {
    std::size_t next = 0;
    if (off < p.size() && !closed_ && !(closing_ && !flush_)) {
      next = sealer_->seal_data_batch(p.data() + off, p.size() - off, chunk, frames,
                                      batch_wire_[1 - cur].data(), batch, used);
      off += used;
    }
    bool written = co_await write_all(batch_wire_[cur].data(), n);
    if (!batch.wait_all()) throw std::logic_error("crypto threads: sealing failed");
    if (!written) co_return false;
    cur = 1 - cur;
    n = next;
  }
  co_return !closed_;
}

asio::awaitable<void> Channel::writer() {
  auto self = shared_from_this();
  while (!closed_) {
    if (closing_ && (!flush_ || queue_.empty())) {
      queue_.clear();
      queued_bytes_ = 0;
      // The wire carries the text (the remote logs it as its remote_closed detail).
      std::string r = close_reason_.text().substr(0, kMaxCloseReasonBytes);
      if (!co_await send_frame(FrameType::Close, reinterpret_cast<const std::uint8_t*>(r.data()),
                               r.size()))
        co_return;
      std::error_code ec;
      socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
      co_return;  // the reader waits for the remote's end within the linger deadline
    }
    if (queue_.empty()) {
      writer_signal_.expires_at(last_tx_ + opts_->limits.keepalive_interval);
      co_await writer_signal_.async_wait(kUseTuple);
      if (closed_) co_return;
      if (queue_.empty() && !closing_ &&
          Clock::now() >= last_tx_ + opts_->limits.keepalive_interval) {
        // Idle for a keepalive interval: a large frame buffer goes back to the system.
        if (wire_.capacity() > kIdleWireKeepBytes) Bytes().swap(wire_);
        if (!co_await send_frame(FrameType::Ping, nullptr, 0)) co_return;
      }
      continue;
    }
    Outgoing m = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= m.payload->size();
    if (!co_await send_message(m)) co_return;
  }
}

bool Channel::send(std::uint8_t type, SharedBytes payload) {
  if (!is_open() || !payload) return false;
  const Limits& l = opts_->limits;
  if (payload->size() > l.max_message_bytes) {
    spdlog::warn("net: {} refusing to send a {}-byte message (limit {})", peer_id_, payload->size(),
                 l.max_message_bytes);
    return false;
  }
  if (queue_.size() >= l.send_queue_max_messages) return false;
  if (!queue_.empty() && queued_bytes_ + payload->size() > l.send_queue_max_bytes) return false;
  queued_bytes_ += payload->size();
  queue_.push_back(Outgoing{type, std::move(payload)});
  writer_signal_.cancel();
  return true;
}

void Channel::close(CloseCause cause) { begin_close(std::move(cause), true); }

void Channel::shutdown(CloseCause cause) { begin_close(std::move(cause), false); }

void Channel::begin_close(CloseCause reason, bool flush) {
  if (closing_ || closed_) return;
  if (!established_) {
    fail(reason);
    return;
  }
  closing_ = true;
  flush_ = flush;
  close_reason_ = reason;
  if (!reported_) {
    // Posted: on_closed never runs inside the caller's close().
    reported_ = true;
    auto self = shared_from_this();
    asio::post(socket_.get_executor(),
               [self, reason] { self->host_.channel_report_closed(self, reason); });
  }
  set_deadline(std::min(deadline_, Clock::now() + opts_->limits.close_linger),
               CloseCause{CloseReason::Timeout, "close linger"});
  writer_signal_.cancel();
}

void Channel::fail(CloseCause reason) {
  if (closed_) return;
  closed_ = true;
  auto self = shared_from_this();
  if (established_ && !reported_) {
    reported_ = true;
    close_reason_ = reason;
    host_.channel_report_closed(self, reason);
  }
  std::error_code ec;
  socket_.close(ec);
  watchdog_timer_.cancel();
  writer_signal_.cancel();
  queue_.clear();
  host_.channel_gone(self, reason);
}

}  // namespace gossiptrain::net
