// Cluster membership over a net::Transport: join through seeds with push-pull sync, then SWIM
// failure detection with Lifeguard suspicion, after hashicorp/memberlist (state.go, suspicion.go).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/rng.hpp"
#include "gossip/membership/member_table.hpp"
#include "gossip/membership/messages.hpp"
#include "gossip/membership/peer_directory.hpp"
#include "net/socket/address.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

using net::Millis;

struct MembershipConfig {
  std::vector<std::string> seeds;  // "host:port"; our own listen address is skipped
  Millis probe_interval{1000};     // one probe per period
  Millis probe_timeout{500};       // direct ack deadline before indirect probes
  int indirect_checks = 3;         // k members asked to ping on a missed ack
  // Suspicion timeout: min = suspicion_mult * max(1, log10(n)) * probe_interval, starting at
  // max = suspicion_max_timeout_mult * min and shrinking towards min with independent
  // confirmations (Lifeguard), as memberlist.
  int suspicion_mult = 4;
  int suspicion_max_timeout_mult = 6;
  int retransmit_mult = 4;      // each update is piggybacked retransmit_mult*ceil(log10(n+1)) times
  Millis gossip_interval{200};  // dissemination of pending updates to gossip_nodes members
  int gossip_nodes = 3;
  Millis gossip_to_the_dead{30000};   // dead members still get gossip this long (to refute)
  std::size_t max_piggyback = 16;     // updates per ping/ack/gossip message
  Millis push_pull_interval{30000};   // anti-entropy full sync with one random member
  Millis reconnect_interval{10000};   // sync attempt with one random dead member (heals partitions)
  Millis join_timeout{3000};          // wait for any seed's sync reply
  Millis join_backoff_initial{1000};  // retry delay when no seed answered, doubling ...
  Millis join_backoff_max{30000};     // ... up to this
  // A joiner gives up after this many attempts in a row in which every seed closed the connection
  // during the handshake (0: never): the seeds refuse it (a different network key, or their
  // allowlist), and retrying will not change that.
  int join_refused_limit = 3;
  Millis idle_connection_timeout{60000};  // connections we dialed, without membership traffic
  Millis dead_reap_after{3'600'000};      // dead/left members are forgotten after this
  Millis leave_linger{500};               // after leave(): time for the leave to go out
  std::size_t max_pending_per_peer = 64;  // messages queued while dialing a peer
  // Starting incarnation. Unset: wall-clock seconds, so a restarted peer usually starts above
  // anything it announced before; if not, it refutes when it hears its old state.
  std::optional<std::uint64_t> initial_incarnation;
  std::uint64_t rng_seed = 0;  // 0: seeded from std::random_device
  // Where peer ids and addresses are interned (member_table.hpp). Null: a table of its own; a
  // process running many peers (gossip-sim) passes one to all of them.
  std::shared_ptr<MemberNames> names;

  // Throws std::invalid_argument describing the first bad value.
  void validate() const;
};

// The push-pull period for n live members (memberlist pushPullScale): the interval up to 32
// members, then one more interval per doubling.
Millis push_pull_period(Millis interval, std::size_t n);

// Called on the protocol thread for every state change of another member (first sight included).
using MemberListener = std::function<void(const MemberInfo&)>;

// Register with the transport directly (transport.set_handler(&m)) or, when the transport is
// shared, through a Dispatcher for [kMembershipTypeFirst, kMembershipTypeLast]. It only uses
// connections it dialed itself or on which a membership message arrived, and only closes the ones
// it dialed, so other protocols' connections are left alone. All methods except live_peers(),
// members(), member() and incarnation() must be called on the transport's protocol thread.
class Membership : public net::TransportHandler, public PeerDirectory {
 public:
  Membership(net::Transport& transport, MembershipConfig config);
  ~Membership() override;
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  void set_listener(MemberListener listener) { listener_ = std::move(listener); }
  // The progress word (messages.hpp) we put in every ping, ping-req and ack, read when one is
  // sent (protocol thread); and who hears the word a member put in one it sent us. Unset: we say
  // "not known" and ignore what we hear.
  void set_progress(std::function<ProgressWord()> own,
                    std::function<void(const std::string&, const ProgressWord&)> heard) {
    own_word_ = std::move(own);
    heard_word_ = std::move(heard);
  }
  // Called once, with what is most likely wrong, when the join gives up (join_refused_limit, or
  // at once when a seed proves it holds our identity key); the membership then stops trying to
  // join.
  void set_join_refused_handler(std::function<void(const std::string&)> h) {
    join_refused_handler_ = std::move(h);
  }
  // Starts the timers and the join through the seeds (none: we are the first member).
  void start();
  // Graceful leave: announces "left" to members directly and by gossip, stops after leave_linger.
  void leave();
  // Stops timers and closes the connections we dialed; no leave announced (a crash, to others).
  void stop();
  // A push-pull full-state sync with one random live member now, besides the periodic one
  // (protocol thread). A peer that waits for a cohort calls it: a joiner that missed the gossip of
  // members who joined just after it would otherwise learn of them only at the next periodic
  // sync (--push-pull-interval, 30 s).
  void sync_now();
  // Probe member id at the next probe period instead of in its turn (protocol thread): an
  // exchange's transfer with it has gone silent. A failed probe makes it suspect as usual.
  void probe_soon(const std::string& id);

  std::vector<PeerRef> live_peers() const override;               // thread-safe
  std::size_t live_count() const override;                        // thread-safe
  std::vector<PeerRef> live_sample(std::size_t k, base::ProtocolRng& rng) const override;
  std::vector<std::string> member_ids() const override;                  // thread-safe
  std::uint64_t members_version() const override;                        // thread-safe
  std::optional<PeerRef> live_peer(const std::string& id) const override;  // thread-safe
  bool suspected(const std::string& id) const override;                   // protocol thread
  std::vector<MemberInfo> members() const;                        // thread-safe; includes ourselves
  std::optional<MemberInfo> member(const std::string& id) const;  // thread-safe
  std::uint64_t incarnation() const;                              // thread-safe
  bool joined() const { return joined_; }
  // Peer ids of the open connections we dialed (diagnostics and tests; protocol thread only).
  std::vector<std::string> dialed_peers() const;
  const MembershipConfig& config() const { return cfg_; }

  void on_connection(const net::ConnectionPtr& c, bool inbound) override;
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& payload) override;
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override;

 private:
  using Row = MemberTable::Row;
  // Lifeguard suspicion (memberlist suspicion.go): starts at max, shrinks towards min as k
  // independent members confirm.
  struct Suspicion {
    std::uint64_t incarnation = 0;
    int k = 0;
    Millis min{0}, max{0};
    Millis start{0};
    std::set<NameId> confirmations;
    net::Scheduler::TimerId timer = 0;
  };
  struct Link {  // the connection we use to talk to one peer
    net::ConnectionPtr conn;
    bool dialing = false;
    std::vector<std::pair<std::uint8_t, net::SharedBytes>> pending;  // while dialing
  };
  struct Owned {  // a connection we dialed: ours to close when idle
    net::ConnectionPtr conn;
    Millis last_used{0};  // last membership message received on it
    std::uint64_t order = 0;
  };
  struct AckWait {
    std::function<void()> on_ack;
    net::Scheduler::TimerId timer = 0;
  };
  struct Probe {
    NameId target = kNoName;
    std::uint32_t seq = 0;
    bool acked = false;
    bool active = false;
  };

  // Timer loops.
  void probe_tick();
  void finish_probe();
  void gossip_tick();
  void push_pull_tick();
  void reconnect_tick();
  void housekeeping_tick();
  void join_attempt();
  void join_check();
  void join_dial_failed();
  void indirect_probe(std::uint32_t seq);

  // State machine (memberlist state.go).
  void alive_node(const Update& a, bool bootstrap);
  void suspect_node(const Update& s);
  void dead_node(const Update& d);
  void merge_remote(const std::vector<Update>& remote);
  void apply(const Update& u);
  void apply_all(const net::ConnectionPtr& c, const std::vector<Update>& updates);
  void refute(std::uint64_t accused_incarnation);
  void start_suspicion(const Row& m, NameId from);
  bool confirm_suspicion(NameId id, NameId from);
  void suspicion_fired(NameId id, std::uint64_t incarnation);
  void cancel_suspicion(NameId id);
  // The name of an accuser (`from` of a suspect or dead update), interned while the table of
  // names is not too large for one that is not a member (kNoName after that).
  NameId accuser(const std::string& from);
  Millis suspicion_min_timeout(std::size_t n) const;

  // Dissemination.
  std::vector<Update> take_broadcasts(std::size_t max);
  // Our progress word for a message we send, and handing on the one a member sent us.
  ProgressWord own_word() const { return own_word_ ? own_word_() : ProgressWord{}; }
  void heard_word(const net::ConnectionPtr& c, const ProgressWord& w) const {
    if (heard_word_ && w.progress >= 0) heard_word_(c->peer_id(), w);
  }
  int retransmit_limit() const;

  // Messaging.
  void handle(const net::ConnectionPtr& c, std::uint8_t type, const net::Bytes& payload);
  void handle_ping(const net::ConnectionPtr& c, PingMsg m);
  void handle_ping_req(const net::ConnectionPtr& c, PingReqMsg m);
  void handle_ack(const net::ConnectionPtr& c, AckMsg m);
  void handle_sync(const net::ConnectionPtr& c, SyncMsg m, bool reply);
  void send_to(const std::string& id, const std::string& addr, MembershipType type,
               net::Bytes payload);
  void send_on(const net::ConnectionPtr& c, MembershipType type, net::Bytes payload);
  void send_sync_to_addr(const std::string& addr, bool join);
  void expect_ack(std::uint32_t seq, Millis timeout, std::function<void()> on_ack,
                  std::function<void()> on_timeout = {});
  void drop_link(const std::string& id);
  void forget_link_if_idle(const std::string& id);  // no connection, no dial, nothing pending
  void adopt(const net::ConnectionPtr& c, bool dialed);

  // Helpers.
  Update self_update() const;
  std::vector<Update> full_state() const;
  std::size_t est_num_nodes() const;
  Update update_of(const Row& m, MemberState state, const std::string& from) const;
  // Copies: sending may change the table.
  std::vector<Row> random_members(std::size_t k, NameId exclude,
                                  const std::function<bool(const Row&)>& ok);
  void set_state(const Row& m, MemberState s);
  void notify(const Row& m);
  // A timer that becomes a no-op once we stop or are destroyed.
  net::Scheduler::TimerId later(Millis d, std::function<void()> fn);

  net::Transport& transport_;
  net::Scheduler& sched_;
  MembershipConfig cfg_;
  std::string self_id_;
  std::string self_addr_;
  base::ProtocolRng rng_;
  MemberListener listener_;
  std::function<ProgressWord()> own_word_;
  std::function<void(const std::string&, const ProgressWord&)> heard_word_;
  std::shared_ptr<bool> token_;  // weakly held by callbacks that may outlive us

  std::unique_ptr<MemberTable> table_;  // ourselves included; see member_table.hpp
  NameId self_name_ = kNoName;
  std::set<NameId> down_;  // members dead or left (not ourselves): what reaping looks at
  std::unordered_map<NameId, Suspicion> suspicions_;
  // Only while a connection is open, being dialed or has messages waiting for one.
  std::unordered_map<std::string, Link> links_;
  std::unordered_map<const net::Connection*, Owned> owned_;
  std::uint64_t owned_order_ = 0;
  Millis next_idle_check_ = Millis::max();  // no owned connection can be idle before this
  std::unordered_map<std::uint32_t, AckWait> acks_;
  std::vector<NameId> probe_order_;
  std::size_t probe_index_ = 0;
  Probe probe_;
  std::uint32_t next_seq_ = 1;
  std::set<std::string> unroutable_seen_;  // "id@addr" already logged as unroutable

  bool running_ = false;
  bool leaving_ = false;
  bool joined_ = false;
  bool join_in_progress_ = false;
  bool join_answered_ = false;
  std::uint32_t join_seq_lo_ = 0;  // sync replies with seq >= this complete the current join
  Millis join_backoff_{0};
  int join_tried_ = 0;              // seeds dialled by the current join attempt ...
  int join_refused_ = 0;            // ... and those that closed the connection in the handshake
  int join_failed_ = 0;             // ... and those whose dial failed, refused or not
  std::uint64_t join_attempt_no_ = 0;  // a stale attempt's answer deadline does nothing
  bool join_waiting_ = false;          // the current attempt is not judged yet (join_check)
  int join_refused_attempts_ = 0;   // attempts in a row refused by every seed
  bool join_given_up_ = false;      // ... join_refused_limit times: no more tries
  std::string join_refused_error_;  // the last such refusal, as the transport said it
  std::function<void(const std::string&)> join_refused_handler_;
};

}  // namespace gossiptrain::gossip
