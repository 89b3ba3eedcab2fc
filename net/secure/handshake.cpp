// The handshake state machine (see handshake.hpp for the message layout and the transcript).
#include "net/secure/handshake.hpp"
#include "base/bytes.hpp"

#include <cstring>

namespace gossiptrain::net {
namespace {

using crypto::Aead;
using U8Span = std::span<const std::uint8_t>;

constexpr std::uint8_t kOldMagic[4] = {'G', 'T', 'H', '1'};
constexpr const char* kPrologue = "gossiptrain handshake v1";
constexpr const char* kSigLabelI = "gossiptrain sig initiator v1";
constexpr const char* kSigLabelR = "gossiptrain sig responder v1";
constexpr std::uint8_t kMaskAes = 1;
constexpr std::uint8_t kMaskChaCha = 2;

U8Span str_span(const char* s) {
  return U8Span(reinterpret_cast<const std::uint8_t*>(s), std::strlen(s));
}

std::uint8_t mask_of(Aead a) { return a == Aead::Aes256Gcm ? kMaskAes : kMaskChaCha; }

std::string hex64(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// The handshake's own encryption: ChaCha20-Poly1305, available everywhere, each key used for at
// most two messages with distinct nonces.
void hs_seal(const crypto::SymKey& k, std::uint64_t nonce, const crypto::Hash& ad, U8Span in,
             std::uint8_t* out) {
  crypto::AeadCipher c(Aead::ChaCha20Poly1305, k);
  c.seal(out, out + in.size(), in.data(), in.size(), ad, nonce);
}

bool hs_open(const crypto::SymKey& k, std::uint64_t nonce, const crypto::Hash& ad, U8Span in,
             std::uint8_t* out) {
  if (in.size() < crypto::kAeadTagBytes) return false;
  std::size_t n = in.size() - crypto::kAeadTagBytes;
  crypto::AeadCipher c(Aead::ChaCha20Poly1305, k);
  return c.open(out, in.data(), n, in.data() + n, ad, nonce);
}

}  // namespace

std::uint8_t aead_mask(AeadPreference pref) {
  switch (pref) {
    case AeadPreference::Aes256Gcm: return crypto::aes256gcm_available() ? kMaskAes : 0;
    case AeadPreference::ChaCha20Poly1305: return kMaskChaCha;
    case AeadPreference::Auto:
    default:
      return static_cast<std::uint8_t>((crypto::aes256gcm_available() ? kMaskAes : 0) |
                                       kMaskChaCha);
  }
}

Handshake::Handshake(Role role, HandshakeParams params)
    : role_(role),
      params_(std::move(params)),
      state_(role == Role::Initiator ? State::Start : State::AwaitM1) {
  crypto::init();
  if (!params_.identity) throw ConfigError("handshake: no identity");
  if (params_.listen_addr.size() > kMaxAddrBytes)
    throw ConfigError("handshake: listen address longer than " + std::to_string(kMaxAddrBytes));
  my_mask_ = aead_mask(params_.aead);
  if (my_mask_ == 0) throw ConfigError("AES-256-GCM was required but this CPU lacks AES-NI");
  if (params_.network_key) net_key_ = *params_.network_key;
  mac_key_ = crypto::kdf(net_key_, "handshake mac");
  crypto::x25519_keypair(eph_pk_, eph_sk_);
  append(str_span(kPrologue));
}

Handshake::~Handshake() = default;

crypto::Hash Handshake::transcript_hash(U8Span extra) const {
  return crypto::hash({transcript_, extra});
}

crypto::Hash Handshake::mac_of(U8Span body) const {
  crypto::Hash h = transcript_hash();
  return crypto::hash({h, body}, mac_key_.span());
}

bool Handshake::check_mac(U8Span msg) {
  U8Span body = msg.first(msg.size() - kMacBytes);
  crypto::Hash want = mac_of(body);
  return crypto::equal_ct(want, msg.last(kMacBytes));
}

Bytes Handshake::fail(std::string reason, CloseReason type) {
  state_ = State::Failed;
  error_ = "handshake: " + std::move(reason);
  close_reason_ = type;
  return {};
}

void Handshake::fail_same_key() {
  if (result_.remote_instance == params_.instance)
    fail("connected to ourselves", CloseReason::Self);
  else
    fail("the remote holds this peer's identity key: another live peer uses it",
         CloseReason::SharedIdentity);
}

std::string Handshake::remote_peer_id() const {
  return have_remote_ ? result_.remote_peer_id : std::string();
}

std::size_t Handshake::expected_bytes() const {
  switch (state_) {
    case State::AwaitM1: return kM1Bytes;
    case State::AwaitM2: return kM2Bytes;
    case State::AwaitM3: return kM3Bytes;
    case State::AwaitM4: return kM4Bytes;
    default: return 0;
  }
}

void Handshake::derive_handshake_keys(const crypto::PublicKey& remote_eph, std::uint8_t chosen) {
  // Caller has already checked the shared secret; recomputed here to keep one code path.
  crypto::SymKey ss;
  crypto::x25519(eph_sk_, remote_eph, ss);
  const crypto::PublicKey& e_i = role_ == Role::Initiator ? eph_pk_ : remote_eph;
  const crypto::PublicKey& e_r = role_ == Role::Initiator ? remote_eph : eph_pk_;
  crypto::Hash h = crypto::hash({transcript_, e_i, e_r, U8Span(&chosen, 1)});
  crypto::Hash ikm = crypto::hash({ss.span(), h});
  prk_ = crypto::kdf(net_key_, "handshake prk", ikm);
  k_i_ = crypto::kdf(prk_, "handshake i2r");
  k_r_ = crypto::kdf(prk_, "handshake r2i");
  crypto::secure_zero(ikm.data(), ikm.size());
}

void Handshake::encode_hello(std::uint8_t* out) const {
  std::memset(out, 0, kHelloBytes);
  base::put_u16(out, params_.version);
  base::put_u64(out + 2, params_.fingerprint);
  base::put_u64(out + 10, params_.instance);
  out[18] = static_cast<std::uint8_t>(params_.listen_addr.size());
  std::memcpy(out + 19, params_.listen_addr.data(), params_.listen_addr.size());
}

bool Handshake::decode_hello(const std::uint8_t* in) {
  result_.remote_version = base::get_u16(in);
  result_.remote_fingerprint = base::get_u64(in + 2);
  result_.remote_instance = base::get_u64(in + 10);
  std::size_t n = in[18];
  if (n > kMaxAddrBytes) return false;
  for (std::size_t i = 0; i < kMaxAddrBytes; ++i) {
    std::uint8_t c = in[19 + i];
    if (i < n ? (c < 0x21 || c > 0x7e) : c != 0) return false;  // printable, zero padded
  }
  result_.remote_listen_addr.assign(reinterpret_cast<const char*>(in + 19), n);
  return true;
}

bool Handshake::check_hello() {
  if (result_.remote_version != params_.version) {
    fail("protocol version mismatch (ours " + std::to_string(params_.version) + ", theirs " +
         std::to_string(result_.remote_version) + ")");
    return false;
  }
  if (result_.remote_fingerprint != params_.fingerprint) {
    fail("model fingerprint mismatch (ours " + hex64(params_.fingerprint) + ", theirs " +
         hex64(result_.remote_fingerprint) + ")");
    return false;
  }
  return true;
}

Bytes Handshake::start() {
  if (role_ != Role::Initiator || state_ != State::Start)
    throw std::logic_error("Handshake::start: not a fresh initiator");
  Bytes m(kM1Bytes);
  std::memcpy(m.data(), kMagic, 4);
  m[4] = my_mask_;
  std::memcpy(m.data() + 5, eph_pk_.data(), 32);
  crypto::Hash mac = mac_of(U8Span(m).first(kM1Bytes - kMacBytes));
  std::memcpy(m.data() + kM1Bytes - kMacBytes, mac.data(), kMacBytes);
  append(m);
  state_ = State::AwaitM2;
  return m;
}

Bytes Handshake::on_message(U8Span in) {
  std::size_t want = expected_bytes();
  if (want == 0) return fail("unexpected message in state " + std::to_string(int(state_)));
  if (in.size() != want)
    return fail("message of " + std::to_string(in.size()) + " bytes, expected " +
                std::to_string(want));
  switch (state_) {
    case State::AwaitM1: return on_m1(in);
    case State::AwaitM2: return on_m2(in);
    case State::AwaitM3: return on_m3(in);
    case State::AwaitM4: return on_m4(in);
    default: return fail("bad state");
  }
}

// R: M1 -> M2.
Bytes Handshake::on_m1(U8Span in) {
  if (std::memcmp(in.data(), kOldMagic, 4) == 0)
    return fail(
        "the remote speaks handshake 1, of a gossiptrain release older than this one (handshake "
        "2): run the same release on every peer");
  if (std::memcmp(in.data(), kMagic, 4) != 0) return fail("bad magic (not a gossiptrain peer)");
  if (!check_mac(in)) return fail("bad MAC on first message (corrupt, or network key mismatch)");
  std::uint8_t theirs = in[4];
  if (theirs & ~(kMaskAes | kMaskChaCha)) return fail("bad AEAD mask");
  std::uint8_t common = theirs & my_mask_;
  if (common == 0)
    return fail("no common AEAD (ours mask " + std::to_string(my_mask_) + ", theirs " +
                std::to_string(theirs) + ")");
  Aead chosen = (common & kMaskAes) ? Aead::Aes256Gcm : Aead::ChaCha20Poly1305;
  crypto::PublicKey e_i;
  std::memcpy(e_i.data(), in.data() + 5, 32);
  crypto::SymKey ss;
  if (!crypto::x25519(eph_sk_, e_i, ss)) return fail("bad ephemeral key");
  append(in);
  result_.aead = chosen;
  std::uint8_t chosen_byte = static_cast<std::uint8_t>(chosen);
  derive_handshake_keys(e_i, chosen_byte);

  Bytes m(kM2Bytes);
  std::memcpy(m.data(), eph_pk_.data(), 32);
  m[32] = chosen_byte;
  crypto::Hash ad = crypto::hash({transcript_, U8Span(m).first(33)});
  hs_seal(k_r_, 0, ad, params_.identity->public_key(), m.data() + 33);
  crypto::Hash mac = mac_of(U8Span(m).first(kM2Bytes - kMacBytes));
  std::memcpy(m.data() + kM2Bytes - kMacBytes, mac.data(), kMacBytes);
  append(m);
  append(params_.identity->public_key());
  state_ = State::AwaitM3;
  return m;
}

// I: M2 -> M3.
Bytes Handshake::on_m2(U8Span in) {
  if (!check_mac(in)) return fail("bad MAC on second message (corrupt, or network key mismatch)");
  crypto::PublicKey e_r;
  std::memcpy(e_r.data(), in.data(), 32);
  std::uint8_t chosen_byte = in[32];
  if (chosen_byte != static_cast<std::uint8_t>(Aead::Aes256Gcm) &&
      chosen_byte != static_cast<std::uint8_t>(Aead::ChaCha20Poly1305))
    return fail("unknown AEAD chosen");
  Aead chosen = static_cast<Aead>(chosen_byte);
  if (!(mask_of(chosen) & my_mask_))
    return fail(std::string("responder chose an AEAD we did not offer: ") +
                crypto::aead_name(chosen));
  crypto::SymKey ss;
  if (!crypto::x25519(eph_sk_, e_r, ss)) return fail("bad ephemeral key");
  derive_handshake_keys(e_r, chosen_byte);
  crypto::Hash ad = crypto::hash({transcript_, in.first(33)});
  crypto::PublicKey id_r;
  if (!hs_open(k_r_, 0, ad, in.subspan(33, 32 + crypto::kAeadTagBytes), id_r.data()))
    return fail("cannot decrypt responder identity");
  result_.aead = chosen;
  result_.remote_key = id_r;
  result_.remote_peer_id = peer_id_of(id_r);
  have_remote_ = true;
  // Our own key is only a claim until R's signature (M4) verifies: carry on to find out whether
  // it is ourselves or another process holding the key.
  if (id_r != params_.identity->public_key() && params_.allowlist &&
      !params_.allowlist->contains(id_r))
    return fail("remote key " + result_.remote_peer_id + " is not on the allowlist");
  append(in);
  append(id_r);

  // M3: our identity, our signature over the transcript including both identities, our hello.
  const crypto::PublicKey& id_i = params_.identity->public_key();
  std::uint8_t hello[kHelloBytes];
  encode_hello(hello);
  crypto::Hash to_sign = crypto::hash({transcript_, id_i, U8Span(hello, kHelloBytes)});
  Bytes sig_msg(str_span(kSigLabelI).begin(), str_span(kSigLabelI).end());
  sig_msg.insert(sig_msg.end(), to_sign.begin(), to_sign.end());
  crypto::Signature sig = params_.identity->sign(sig_msg);
  Bytes plain(32 + crypto::kSignatureBytes + kHelloBytes);
  std::memcpy(plain.data(), id_i.data(), 32);
  std::memcpy(plain.data() + 32, sig.data(), sig.size());
  std::memcpy(plain.data() + 32 + sig.size(), hello, kHelloBytes);
  Bytes m(kM3Bytes);
  hs_seal(k_i_, 0, transcript_hash(), plain, m.data());
  crypto::secure_zero(plain.data(), plain.size());
  crypto::Hash mac = mac_of(U8Span(m).first(kM3Bytes - kMacBytes));
  std::memcpy(m.data() + kM3Bytes - kMacBytes, mac.data(), kMacBytes);
  append(m);
  append(id_i);
  append(U8Span(hello, kHelloBytes));
  state_ = State::AwaitM4;
  return m;
}

// R: M3 -> M4 (M4 is still returned on a hello mismatch so that I sees the reason too).
Bytes Handshake::on_m3(U8Span in) {
  if (!check_mac(in)) return fail("bad MAC on third message (corrupt, or network key mismatch)");
  Bytes plain(32 + crypto::kSignatureBytes + kHelloBytes);
  if (!hs_open(k_i_, 0, transcript_hash(), in.first(kM3Bytes - kMacBytes), plain.data()))
    return fail("cannot decrypt initiator identity");
  crypto::PublicKey id_i;
  std::memcpy(id_i.data(), plain.data(), 32);
  crypto::Signature sig;
  std::memcpy(sig.data(), plain.data() + 32, sig.size());
  const std::uint8_t* hello_i = plain.data() + 32 + sig.size();
  crypto::Hash signed_hash = crypto::hash({transcript_, id_i, U8Span(hello_i, kHelloBytes)});
  Bytes sig_msg(str_span(kSigLabelI).begin(), str_span(kSigLabelI).end());
  sig_msg.insert(sig_msg.end(), signed_hash.begin(), signed_hash.end());
  result_.remote_key = id_i;
  result_.remote_peer_id = peer_id_of(id_i);
  have_remote_ = true;
  if (!crypto::verify(id_i, sig_msg, sig)) return fail("bad initiator signature");
  const bool same_key = id_i == params_.identity->public_key();
  if (!same_key && params_.allowlist && !params_.allowlist->contains(id_i))
    return fail("remote key " + result_.remote_peer_id + " is not on the allowlist");
  if (!decode_hello(hello_i)) return fail("malformed hello");
  append(in);
  append(id_i);
  append(U8Span(hello_i, kHelloBytes));

  std::uint8_t hello[kHelloBytes];
  encode_hello(hello);
  crypto::Hash to_sign = crypto::hash({transcript_, U8Span(hello, kHelloBytes)});
  Bytes my_sig_msg(str_span(kSigLabelR).begin(), str_span(kSigLabelR).end());
  my_sig_msg.insert(my_sig_msg.end(), to_sign.begin(), to_sign.end());
  crypto::Signature my_sig = params_.identity->sign(my_sig_msg);
  Bytes p4(crypto::kSignatureBytes + kHelloBytes);
  std::memcpy(p4.data(), my_sig.data(), my_sig.size());
  std::memcpy(p4.data() + my_sig.size(), hello, kHelloBytes);
  Bytes m(kM4Bytes);
  hs_seal(k_r_, 1, transcript_hash(), p4, m.data());
  crypto::Hash mac = mac_of(U8Span(m).first(kM4Bytes - kMacBytes));
  std::memcpy(m.data() + kM4Bytes - kMacBytes, mac.data(), kMacBytes);
  append(m);
  append(U8Span(hello, kHelloBytes));
  if (same_key) {
    fail_same_key();
    return m;
  }
  if (!check_hello()) return m;
  finish();
  return m;
}

// I: M4 -> done.
Bytes Handshake::on_m4(U8Span in) {
  if (!check_mac(in)) return fail("bad MAC on fourth message (corrupt, or network key mismatch)");
  Bytes plain(crypto::kSignatureBytes + kHelloBytes);
  if (!hs_open(k_r_, 1, transcript_hash(), in.first(kM4Bytes - kMacBytes), plain.data()))
    return fail("cannot decrypt responder signature");
  crypto::Signature sig;
  std::memcpy(sig.data(), plain.data(), sig.size());
  const std::uint8_t* hello_r = plain.data() + sig.size();
  crypto::Hash signed_hash = crypto::hash({transcript_, U8Span(hello_r, kHelloBytes)});
  Bytes sig_msg(str_span(kSigLabelR).begin(), str_span(kSigLabelR).end());
  sig_msg.insert(sig_msg.end(), signed_hash.begin(), signed_hash.end());
  if (!crypto::verify(result_.remote_key, sig_msg, sig)) return fail("bad responder signature");
  if (!decode_hello(hello_r)) return fail("malformed hello");
  append(in);
  append(U8Span(hello_r, kHelloBytes));
  if (result_.remote_key == params_.identity->public_key()) {
    fail_same_key();
    return {};
  }
  if (!check_hello()) return {};
  finish();
  return {};
}

void Handshake::finish() {
  crypto::Hash h = transcript_hash();
  crypto::SymKey i2r = crypto::kdf(prk_, "session i2r", h);
  crypto::SymKey r2i = crypto::kdf(prk_, "session r2i", h);
  result_.send_key = role_ == Role::Initiator ? i2r : r2i;
  result_.recv_key = role_ == Role::Initiator ? r2i : i2r;
  crypto::secure_zero(eph_sk_.data(), eph_sk_.size());
  crypto::secure_zero(prk_.data(), prk_.size());
  crypto::secure_zero(k_i_.data(), k_i_.size());
  crypto::secure_zero(k_r_.data(), k_r_.size());
  state_ = State::Done;
}

HandshakeResult Handshake::take_result() {
  if (state_ != State::Done) throw std::logic_error("Handshake::take_result before done");
  return std::move(result_);
}

}  // namespace gossiptrain::net
