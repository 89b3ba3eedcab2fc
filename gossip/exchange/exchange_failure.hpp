// Why an exchange failed: the `reason` of its exchange event and the key of
// AveragerStats::failed_by_reason. The tokens are part of the metrics output: keep them stable.
#pragma once

#include <string>

#include "gossip/exchange/exchange_messages.hpp"

namespace gossiptrain::gossip {

enum class ExchangeFailure {
  Busy,              // "busy": every peer asked was busy
  Connect,           // "connect"
  Closed,            // "closed"
  Protocol,          // "protocol"
  TimeoutConnect,    // "timeout:connect"
  TimeoutAnswer,     // "timeout:answer"
  TimeoutTransfer,   // "timeout:transfer"
  Refused,           // "refused:<code>"
  InvalidNonFinite,  // "invalid:non-finite"
  InvalidLength,     // "invalid:length"
  InvalidNorm,       // "invalid:norm"
  InvalidRange,      // "invalid:range": an int4-rel vector too far from ours to decode
  Anomalous,         // "anomalous"
  PeerAbort,         // "peer-abort:<code>"
  Backend,           // "backend"
  PartnerLost,       // "partner-lost": membership declared the partner dead or gone mid-exchange
  PartnerSilent,     // "partner-silent": suspected by membership and nothing heard from it in
                     // the transfer for its silence bound (ExchangeProtocol::partner_suspected)
};

// A failure with the code a Refuse or Abort carried (the others ignore it).
struct FailureReason {
  ExchangeFailure kind = ExchangeFailure::Busy;
  ExchangeCode code = ExchangeCode::Protocol;
};

// The metrics token of a failure kind: "refused" and "peer-abort" without their code.
std::string_view failure_name(ExchangeFailure f);
// The whole token, e.g. "refused:weighting", "timeout:answer".
std::string to_string(const FailureReason& r);
inline std::string to_string(ExchangeFailure f) { return to_string(FailureReason{f}); }
bool is_timeout(ExchangeFailure f);
// The partner never answered a try: the dial failed or timed out, no answer to the REQUEST, or
// the connection closed before one (busy and refused are answers).
bool is_unanswered(ExchangeFailure f);
// We refused the partner's vector (anomalous, invalid:*): counts towards banning it.
bool is_vector_refusal(ExchangeFailure f);

}  // namespace gossiptrain::gossip
