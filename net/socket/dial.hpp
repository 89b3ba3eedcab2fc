// One TCP dial under a deadline (resolve, connect, and optionally a first write), for the
// transport's direct dials and its relayed connections (tcp_transport.cpp, net/nat/relay.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

namespace gossiptrain::net {

struct DialOutcome {
  std::shared_ptr<asio::ip::tcp::socket> sock;  // connected (and `first` written); null on failure
  std::string error;  // "connect timeout", "cannot resolve HOST: ...", "connect failed: ...", ...
  bool timed_out = false;
};

// A name is looked up on a detached thread of its own (an address needs none), at most this many
// at once: a lookup that hangs (a departed pod's name, DNS down) is left behind at the deadline
// and never delays another dial or the io_context's destruction (docs/protocol.md, "Dialing").
inline constexpr int kMaxNameLookups = 32;

// Resolves host, connects to the first address that answers and writes `first` (when not empty),
// all before `deadline`; past it, whatever is in flight is cut and the outcome is a timeout.
// The deadline's timer handler holds its state by shared_ptr and acts only while the dial is in
// flight: a timer that expires in the same instant as the connect completes (its handler already
// queued, beyond cancel()) does nothing after this returns. Runs on io's thread.
asio::awaitable<DialOutcome> connect_within(asio::io_context& io, std::string host,
                                            std::uint16_t port,
                                            std::chrono::steady_clock::time_point deadline,
                                            std::vector<std::uint8_t> first = {});

}  // namespace gossiptrain::net
