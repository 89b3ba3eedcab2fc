// How long an initiator waits for a dial and for the answer to its REQUEST (docs/exchange.md,
// "Deadlines and the rate cap"): fitted to the answers this peer has had, the way TCP fits its
// retransmission timeout to the round trips it measures, instead of a fixed 5 s. A responder
// answers a REQUEST at once (ACCEPT, BUSY or REFUSE; its snapshot comes later), so the answer
// time is a round trip plus the partner's network thread: tens of milliseconds on a LAN. A
// partner that cannot be reached (a partition, a crashed host) then costs a second, not 5 s, of
// the one exchange a peer can have in flight, and its own side's requests are not answered BUSY
// meanwhile. Protocol thread; deterministic given the answers recorded.
#pragma once

#include "net/transport.hpp"

namespace gossiptrain::gossip {

class AnswerDeadline {
 public:
  // floor: never less (a loaded machine's scheduling hiccups); ceiling: never more, and the
  // deadline until a first answer was measured (ExchangeConfig::answer_timeout).
  AnswerDeadline(net::Millis floor, net::Millis ceiling);

  // A REQUEST was answered after ms.
  void record(double ms);
  // The answer deadline: smoothed answer time + 4 times its mean deviation, within [floor,
  // ceiling]; ceiling before any answer.
  net::Millis answer() const;
  // The dial's deadline (TCP connect and the encrypted handshake: a few round trips and the key
  // exchange): twice the answer deadline, at most ceiling.
  net::Millis connect() const;

 private:
  net::Millis floor_, ceiling_;
  bool measured_ = false;
  double srtt_ = 0, rttvar_ = 0;  // ms
};

}  // namespace gossiptrain::gossip
