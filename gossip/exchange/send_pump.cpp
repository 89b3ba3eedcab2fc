// The send pump of one exchange (see send_pump.hpp).
#include "gossip/exchange/send_pump.hpp"

#include <cmath>

#include <spdlog/spdlog.h>

#include "gossip/exchange/exchange_messages.hpp"

namespace gossiptrain::gossip {

std::optional<net::Millis> SendPump::pump(net::Connection& c, const Options& o, net::Millis now) {
  constexpr auto kChunk = static_cast<std::uint8_t>(ExchangeType::Chunk);
  while (!control_.empty()) {
    if (!c.send(control_.front().first, control_.front().second)) return o.send_retry;
    control_.pop_front();
  }
  if (!o.chunks || !own_) return std::nullopt;
  auto& chunks = own_->chunks;
  const std::size_t ready = own_->ready_count();  // the training thread may still be filling
  std::size_t offset = sent_ * o.chunk_bytes;
  while (sent_ < ready) {
    net::Bytes& msg = *chunks[sent_];
    if (o.rate > 0) {  // the first chunk at once, then no more than rate bytes per second
      const double due_ms = 1000.0 * static_cast<double>(bytes_sent_) / o.rate;
      const double now_ms = static_cast<double>((now - transfer_started_).count());
      if (due_ms > now_ms)
        return net::Millis(static_cast<std::int64_t>(std::ceil(due_ms - now_ms)));
    }
    // Not handed to the transport yet, so still ours to write.
    write_chunk_header(msg, o.exchange_id, offset);
    if (!c.send(kChunk, chunks[sent_])) return o.send_retry;
    offset += msg.size() - kChunkHeaderBytes;
    bytes_sent_ += msg.size();
    if (++sent_ == chunks.size())
      spdlog::trace("averager: exchange {} payload queued", o.exchange_id);
  }
  return std::nullopt;
}

}  // namespace gossiptrain::gossip
