// One encrypted connection: an Asio session (handshake, then reader coroutine + writer coroutine +
// bounded send queue, watchdog timer for every deadline) that implements Connection.
//
// Error policy of net/:
//  - Anything a remote sends is validated (sizes before allocation, MACs, signatures, frame
//    order); on failure the connection is closed with a reason, logged via spdlog and reported via
//    TransportHandler::on_closed (or the connect callback / on_handshake_failed before the
//    handshake completes). The process keeps running; nothing remote throws.
//  - Expected network events (EOF, reset, timeout) are error codes (as_tuple), not exceptions.
//  - Bad configuration (key files, limits, bind address) throws ConfigError from constructors and
//    start(); apps turn it into a message and exit code 2.
//  - Broken internal invariants throw std::logic_error, which is not caught: the process stops.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "net/buffer_pool.hpp"
#include "net/secure/frame.hpp"
#include "net/secure/handshake.hpp"
#include "net/transport.hpp"

namespace gossiptrain::net {

class Channel;

// What a channel tells its owner (TcpTransport). All calls happen on the io thread.
class ChannelHost {
 public:
  virtual ~ChannelHost() = default;
  virtual void channel_established(const std::shared_ptr<Channel>& ch) = 0;
  virtual void channel_message(const std::shared_ptr<Channel>& ch, std::uint8_t type,
                               Bytes&& payload) = 0;
  // The reason for on_closed, exactly once per established channel.
  virtual void channel_report_closed(const std::shared_ptr<Channel>& ch,
                                     const CloseCause& cause) = 0;
  // The socket is closed and the channel is finished (established or not).
  virtual void channel_gone(const std::shared_ptr<Channel>& ch, const CloseCause& cause) = 0;
};

struct ChannelOptions {
  HandshakeParams handshake;
  Limits limits;
  // Crypto threads (crypto_pool.hpp): the transport's pool, or null for none. Messages of at
  // least parallel_min_message_bytes are sealed and opened by its workers.
  std::shared_ptr<CryptoPool> crypto_pool;
  std::size_t parallel_min_message_bytes = kParallelMinMessageBytes;
  // The transport's pool of large message buffers (buffer_pool.hpp); never null.
  std::shared_ptr<BufferPool> buffers = std::make_shared<BufferPool>();
};

class Channel : public Connection, public std::enable_shared_from_this<Channel> {
 public:
  using Clock = std::chrono::steady_clock;

  // `io` is the context the socket belongs to: a channel keeps it alive, so that a Connection the
  // application still holds after its transport is gone can be destroyed safely.
  Channel(std::shared_ptr<asio::io_context> io, asio::ip::tcp::socket socket, bool inbound,
          std::shared_ptr<const ChannelOptions> opts, ChannelHost& host);
  ~Channel() override;

  // Runs the handshake (which must finish before `deadline`), then the session. Io thread only.
  void start(Clock::time_point handshake_deadline);
  // Closes at once, without flushing the send queue (a close frame is still attempted).
  void shutdown(CloseCause cause);
  // Closes the socket now (no close frame); on_closed is reported if it was not yet.
  void terminate(CloseCause cause) { fail(std::move(cause)); }

  // Connection.
  const std::string& peer_id() const override { return peer_id_; }
  const std::string& remote_addr() const override { return remote_addr_; }
  bool send(std::uint8_t type, SharedBytes payload) override;
  using Connection::close;  // close(CloseReason, detail)
  void close(CloseCause cause) override;
  bool is_open() const override { return established_ && !closing_ && !closed_; }

  bool inbound() const { return inbound_; }
  // Through a relay (net/nat/relay.cpp): the bytes pass a third peer, which sees only ciphertext.
  bool relayed() const { return relayed_; }
  void set_relayed() { relayed_ = true; }
  bool established() const { return established_; }
  // Valid once established (or once a failed handshake has decoded the remote's hello).
  const std::string& remote_listen_addr() const { return remote_listen_addr_; }
  crypto::Aead aead() const { return aead_; }
  std::size_t queued_messages() const { return queue_.size(); }

 private:
  struct Outgoing {
    std::uint8_t type;
    SharedBytes payload;
  };

  asio::awaitable<void> run();
  asio::awaitable<void> reader();
  asio::awaitable<void> writer();
  asio::awaitable<void> watchdog();
  asio::awaitable<bool> write_all(const std::uint8_t* data, std::size_t n);
  asio::awaitable<bool> send_frame(FrameType type, const std::uint8_t* plain, std::size_t len);
  asio::awaitable<bool> send_message(const Outgoing& m);
  asio::awaitable<bool> send_data_parallel(const Bytes& p);
  void begin_close(CloseCause reason, bool flush);
  void fail(CloseCause reason);
  void set_deadline(Clock::time_point t, CloseCause reason);

  std::shared_ptr<asio::io_context> io_;  // first: destroyed after the socket and timers
  asio::ip::tcp::socket socket_;
  bool inbound_;
  bool relayed_ = false;
  std::shared_ptr<const ChannelOptions> opts_;
  ChannelHost& host_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer writer_signal_;
  Clock::time_point deadline_;
  CloseCause deadline_reason_;

  std::string peer_id_;
  std::string remote_addr_;
  std::string remote_listen_addr_;
  crypto::Aead aead_ = crypto::Aead::ChaCha20Poly1305;

  std::unique_ptr<FrameSealer> sealer_;
  std::unique_ptr<FrameReceiver> receiver_;
  Bytes wire_;           // one sealed frame (the sender's only copy of payload bytes)
  Bytes small_;          // plaintext of a small message frame
  Bytes batch_wire_[2];  // crypto threads: one batch of sealed frames written, the next sealed

  std::deque<Outgoing> queue_;
  std::uint64_t queued_bytes_ = 0;
  Clock::time_point last_tx_;

  bool established_ = false;
  bool closing_ = false;   // local close requested: no more sends or deliveries
  bool flush_ = false;     // on closing: send what is queued first
  bool closed_ = false;    // socket closed, coroutines ending
  bool reported_ = false;  // on_closed delivered (or posted)
  CloseCause close_reason_;
};

}  // namespace gossiptrain::net
