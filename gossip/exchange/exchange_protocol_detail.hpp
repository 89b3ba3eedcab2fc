// What the two files of the exchange protocol share (exchange_protocol.cpp: the initiator and
// the responder; exchange_transfer.cpp: what both sides do).
#pragma once

#include <cstdint>
#include <string>

#include "base/short_id.hpp"
#include "gossip/exchange/exchange_protocol.hpp"

namespace gossiptrain::gossip::exchange_detail {

using net::Millis;
using Timer = ExchangePort::Timer;
constexpr auto kReq = static_cast<std::uint8_t>(ExchangeType::Request);
constexpr auto kAcc = static_cast<std::uint8_t>(ExchangeType::Accept);
constexpr auto kBusy = static_cast<std::uint8_t>(ExchangeType::Busy);
constexpr auto kRef = static_cast<std::uint8_t>(ExchangeType::Refuse);
constexpr auto kChunk = static_cast<std::uint8_t>(ExchangeType::Chunk);
constexpr auto kValid = static_cast<std::uint8_t>(ExchangeType::Valid);
constexpr auto kAbort = static_cast<std::uint8_t>(ExchangeType::Abort);

using base::short_id;

}  // namespace gossiptrain::gossip::exchange_detail
