// Catch-up: a peer that starts with no checkpoint fetches one live neighbour's whole training state
// (parameters, optimizer state, step/epoch/samples) before its first step, so that it neither
// starts from random weights at the top of its learning-rate schedule nor drags its first partner
// halfway back to them. Two sides sharing the catch-up message range through a Dispatcher: every
// gossiping peer serves (CatchUpServer, a StepHook: the state is taken on the training thread), a
// starting peer fetches (CatchUpClient, protocol thread only).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "base/rng.hpp"
#include "core/checkpoint.hpp"
#include "core/step_hook.hpp"
#include "gossip/catch_up/catch_up_messages.hpp"
#include "gossip/exchange/exchange_messages.hpp"
#include "gossip/membership/peer_directory.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

class Dispatcher;

struct CatchUpServerConfig {
  std::uint64_t fingerprint = 0;      // fetchers with another model are refused
  net::Millis state_timeout{30000};   // Accept -> the state taken at our next step boundary
  net::Millis transfer_timeout_floor{10000};  // state taken -> End queued, plus bytes / rate
  double min_rate_bytes_per_s = 20e6;
  // Payload bytes per Chunk message: with its header, exactly one 1 MiB channel frame.
  std::size_t chunk_bytes = (1u << 20) - kChunkHeaderBytes;
  net::Millis send_retry{1};  // wait before retrying a send refused by back-pressure
};

// One request served, or not (logs and the `catch_up_served` metric line).
struct CatchUpServed {
  std::string peer;  // the fetcher
  bool ok = false;
  std::string reason;  // "" when ok; closed, timeout:state|transfer, protocol, peer-cancel:<code>,
                       // backend
  std::int64_t step = 0;
  std::uint64_t bytes = 0;  // of the encoded state
  double ms = 0.0;          // from the request to the End queued (or the failure)
};

// Serves one fetcher at a time (others get BUSY): a request sets a flag on the protocol thread,
// the next between_steps copies the whole state (ctx.state) and encodes it, and the protocol
// thread streams it in chunks. A peer that has not taken a step yet refuses (not-ready): it has
// nothing but its initial weights to give. Lifetime as the Averager's.
class CatchUpServer final : public core::StepHook, public net::TransportHandler {
 public:
  using EventFn = std::function<void(const CatchUpServed&)>;
  // Registers itself for the serving half of the catch-up types (0x60-0x67).
  CatchUpServer(CatchUpServerConfig cfg, net::Transport& transport, Dispatcher& dispatcher);
  // Same without a dispatcher: the caller routes those types to this handler itself.
  CatchUpServer(CatchUpServerConfig cfg, net::Transport& transport);
  ~CatchUpServer() override;

  void set_event_callback(EventFn fn) { on_event_ = std::move(fn); }  // before traffic starts

  // Training thread: takes the state a request is waiting for. Never waits on the network.
  void between_steps(core::StepContext& ctx) override;
  // A peer resumed from its checkpoint has a trained state before its first step: requests are
  // accepted (not not-ready), and the state is taken at its first step boundary. A cohort that
  // starts together (gossip-peer --min-peers) waits for every member first, so a peer added by a
  // resize can fetch the state of the peers that went on from their checkpoints.
  void trained_state_ready(std::size_t n_params) { n_params_.store(n_params); }

  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override;
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override;

  std::uint64_t served_ok() const { return served_ok_.load(); }
  // Whether our state carries a run on (resumed from a checkpoint, or caught up from a peer)
  // rather than starting from our own initial weights: a request with resumed_only is refused
  // (Fresh) while this is false. Any thread; set it before the node starts, so that no request
  // of a cohort finds it unset.
  void set_carries_run(bool yes) { carries_run_.store(yes); }

 private:
  struct Serve {
    std::uint64_t seq = 0;  // local number, matches the training-thread handoff
    std::uint64_t id = 0;   // fetch id on the wire
    net::ConnectionPtr conn;
    std::string peer;
    net::Millis started{0};
    std::shared_ptr<const net::Bytes> state;  // encoded; null until the training thread took it
    CatchUpHeaderMsg header;
    bool header_sent = false;
    std::size_t sent = 0;             // bytes of state queued
    net::SharedBytes next_chunk;      // cut, refused by back-pressure, sent again as is
    std::uint32_t crc = 0;            // of state[0, sent)
    net::Scheduler::TimerId deadline = 0, retry = 0;
  };

  void on_request(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_cancel(const net::ConnectionPtr& c, const net::Bytes& b);
  void state_ready(std::uint64_t seq, std::shared_ptr<const net::Bytes> state,
                   CatchUpHeaderMsg header);
  void pump();
  void retry_later();
  void arm_deadline(net::Millis d, const std::string& reason);
  void finish(bool ok, const std::string& reason);
  void violation(const net::ConnectionPtr& c, const std::string& what);
  template <typename Fn>
  void post(Fn fn);

  CatchUpServerConfig cfg_;
  net::Scheduler& sched_;
  EventFn on_event_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards posted callbacks

  std::optional<Serve> cur_;  // protocol thread only
  std::uint64_t seq_ = 0;     // protocol thread only
  std::mutex mu_;
  std::uint64_t want_seq_ = 0;  // non-zero: the next step boundary takes the state for it
  std::atomic<std::size_t> n_params_{0};  // known once a step boundary passed with a state
  std::atomic<std::uint64_t> served_ok_{0};
  std::atomic<bool> carries_run_{false};
};

struct CatchUpClientConfig {
  std::uint64_t fingerprint = 0;  // our model's: the state must carry the same
  std::uint64_t n_params = 0;     // the state must hold exactly this many parameters ...
  std::size_t n_opt_state = 1;    // ... and this many optimizer state vectors of that length
  std::size_t max_meta_bytes = 65536;
  net::Millis deadline{60000};   // gives up after this (the caller trains from its own start)
  net::Millis answer_timeout{5000};  // dial + Request -> Accept | Busy | Refuse
  net::Millis state_timeout{35000};  // Accept -> Header (the server's next step boundary)
  net::Millis transfer_timeout_floor{10000};  // Header -> End, plus bytes / rate
  double min_rate_bytes_per_s = 20e6;
  net::Millis busy_retry{500};  // every peer left to ask was busy: ask again after this
  // A cohort's peer (--min-peers above 1): ask only for a state that carries the run on
  // (CatchUpRequestMsg::resumed_only). A peer that says it started fresh is not asked again, and
  // after max_fresh such answers the fetch ends with reason "fresh": the cohort is a first start.
  // One that carries the run on but has not taken its first step yet (not-ready) is asked again
  // after busy_retry, as a busy one.
  bool resumed_only = false;
  int max_fresh = 4;
  std::uint64_t seed = 0;       // peer choice and fetch ids; 0 = from random_device
  // Live members asked first, in this order (a peer left behind asks those it knows are ahead);
  // then the others, at random.
  std::vector<std::string> prefer;
};

// Why one fetch attempt failed; to_string gives its token in CatchUpResult::reason.
enum class CatchUpFailure {
  Connect,             // "connect"
  Closed,              // "closed"
  Busy,                // "busy": asked again in a later round
  Refused,             // "refused:<code>"
  Protocol,            // "protocol"
  PeerAbort,           // "peer-abort:<code>"
  TimeoutConnect,      // "timeout:connect"
  TimeoutAnswer,       // "timeout:answer"
  TimeoutState,        // "timeout:state"
  TimeoutTransfer,     // "timeout:transfer"
  InvalidFingerprint,  // "invalid:fingerprint"
  InvalidLength,       // "invalid:length"
  InvalidChecksum,     // "invalid:checksum"
  InvalidDecode,       // "invalid:decode"
  InvalidSize,         // "invalid:size"
  InvalidCounters,     // "invalid:counters"
  InvalidNonFinite,    // "invalid:non-finite"
};
// A failure with the code a Refuse or Abort carried (the others ignore it).
struct CatchUpFailureReason {
  CatchUpFailure kind = CatchUpFailure::Closed;
  CatchUpCode code = CatchUpCode::Protocol;
};
// The token, e.g. "timeout:state", "refused:not-ready".
std::string to_string(const CatchUpFailureReason& r);

struct CatchUpResult {
  bool ok = false;
  // "" when ok; else why the last attempt failed, or why there was none: no-peer, not-ready, fresh,
  // busy, closed, connect, protocol, refused:<code>, peer-abort:<code>,
  // timeout:connect|answer|state|transfer, invalid:length|checksum|decode|fingerprint|size|
  // counters|non-finite, deadline:<the last attempt's reason>, cancelled.
  std::string reason;
  std::string from;  // the peer the state came from
  core::Checkpoint state;
  std::uint64_t bytes = 0;  // of the encoded state
  double ms = 0.0;          // from start()
  int attempts = 0;         // peers asked
};

// Fetches the state from one random live peer, all or nothing: the whole encoded state is
// checked (length, checksum, fingerprint, sizes, counters, every value finite) before it is
// handed over. Retries another peer on failure, asks busy ones again after a pause, and gives up
// after the deadline. Protocol thread only.
class CatchUpClient final : public net::TransportHandler {
 public:
  using DoneFn = std::function<void(CatchUpResult)>;
  // Registers itself for the fetching half of the catch-up types (0x68-0x6F). peers and transport
  // must outlive the client.
  CatchUpClient(net::Transport& transport, Dispatcher& dispatcher, const PeerDirectory& peers);
  CatchUpClient(net::Transport& transport, const PeerDirectory& peers);
  ~CatchUpClient() override;

  // Starts a fetch; done is called exactly once, on the protocol thread (not from inside start
  // when there is no peer at all: posted). Throws std::logic_error while a fetch is running.
  void start(CatchUpClientConfig cfg, DoneFn done);
  // Gives up the fetch in flight (done gets reason "cancelled"); no-op when none.
  void cancel();
  bool running() const { return done_ != nullptr; }

  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override;
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override;

 private:
  enum class Phase { Connecting, Requested, Accepted, Receiving };
  struct Attempt {
    std::uint64_t seq = 0;
    std::uint64_t id = 0;
    std::string peer;
    net::ConnectionPtr conn;
    Phase phase = Phase::Connecting;
    CatchUpHeaderMsg header;
    net::Bytes data;  // reserved to header.total_bytes, bounded by our model's size
    std::uint32_t crc = 0;
    net::Scheduler::TimerId timer = 0;
  };

  void try_next();
  void ask(const net::ConnectionPtr& c);
  // The attempt in flight failed; busy peers are asked again later, the others not at all.
  void attempt_failed(CatchUpFailureReason reason, std::optional<CatchUpCode> notify);
  // Ends the attempt in flight: its timer, its connection.
  void end_attempt(const std::string& reason);
  void finish(bool ok, std::string reason, core::Checkpoint state = {});
  void arm_timer(net::Millis d, CatchUpFailure reason);
  bool is_current(const net::ConnectionPtr& c, std::uint64_t id) const;
  void violation(const net::ConnectionPtr& c, const std::string& what);
  void on_answer(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& b);
  void on_header(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_chunk(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_end(const net::ConnectionPtr& c, const net::Bytes& b);
  void on_abort(const net::ConnectionPtr& c, const net::Bytes& b);
  // Decodes and checks the received state; nullopt with *reason set when it is refused.
  std::optional<core::Checkpoint> validate(CatchUpFailure* reason) const;
  std::uint64_t min_bytes() const;
  std::uint64_t max_bytes() const;

  net::Transport& transport_;
  net::Scheduler& sched_;
  const PeerDirectory& peers_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

  CatchUpClientConfig cfg_;
  DoneFn done_;
  base::ProtocolRng rng_{1};
  std::optional<Attempt> at_;
  std::uint64_t seq_ = 0;
  net::Millis started_{0};
  net::Scheduler::TimerId deadline_ = 0, retry_ = 0;
  std::set<std::string> excluded_;  // failed or refused: not asked again in this fetch
  std::set<std::string> busy_;      // busy this round: asked again after busy_retry
  std::string last_reason_;         // the token of the last attempt's failure ("" none yet)
  int attempts_ = 0;
  int fresh_ = 0;  // resumed_only: peers that said they started fresh
};

}  // namespace gossiptrain::gossip
