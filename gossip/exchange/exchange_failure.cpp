// The failure tokens of the averaging exchange (see exchange_failure.hpp).
#include "gossip/exchange/exchange_failure.hpp"

namespace gossiptrain::gossip {

std::string_view failure_name(ExchangeFailure f) {
  switch (f) {
    case ExchangeFailure::Busy: return "busy";
    case ExchangeFailure::Connect: return "connect";
    case ExchangeFailure::Closed: return "closed";
    case ExchangeFailure::Protocol: return "protocol";
    case ExchangeFailure::TimeoutConnect: return "timeout:connect";
    case ExchangeFailure::TimeoutAnswer: return "timeout:answer";
    case ExchangeFailure::TimeoutTransfer: return "timeout:transfer";
    case ExchangeFailure::Refused: return "refused";
    case ExchangeFailure::InvalidNonFinite: return "invalid:non-finite";
    case ExchangeFailure::InvalidLength: return "invalid:length";
    case ExchangeFailure::InvalidNorm: return "invalid:norm";
    case ExchangeFailure::InvalidRange: return "invalid:range";
    case ExchangeFailure::Anomalous: return "anomalous";
    case ExchangeFailure::PeerAbort: return "peer-abort";
    case ExchangeFailure::Backend: return "backend";
    case ExchangeFailure::PartnerLost: return "partner-lost";
    case ExchangeFailure::PartnerSilent: return "partner-silent";
  }
  return "unknown";
}

std::string to_string(const FailureReason& r) {
  std::string s(failure_name(r.kind));
  if (r.kind == ExchangeFailure::Refused || r.kind == ExchangeFailure::PeerAbort)
    s += ":" + std::string(code_name(r.code));
  return s;
}

bool is_timeout(ExchangeFailure f) {
  return f == ExchangeFailure::TimeoutConnect || f == ExchangeFailure::TimeoutAnswer ||
         f == ExchangeFailure::TimeoutTransfer;
}

bool is_unanswered(ExchangeFailure f) {
  return f == ExchangeFailure::Connect || f == ExchangeFailure::TimeoutConnect ||
         f == ExchangeFailure::TimeoutAnswer || f == ExchangeFailure::Closed ||
         f == ExchangeFailure::PartnerLost || f == ExchangeFailure::PartnerSilent;
}

bool is_vector_refusal(ExchangeFailure f) {
  return f == ExchangeFailure::Anomalous || f == ExchangeFailure::InvalidNonFinite ||
         f == ExchangeFailure::InvalidLength || f == ExchangeFailure::InvalidNorm;
}

}  // namespace gossiptrain::gossip
