// gossip-bench transport: throughput of the encrypted channel (two TcpTransports in one process,
// each with its own io thread) against plain TCP over loopback and the AEAD alone on one core,
// all measured in the same run; plus handshake latency and rate.
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "apps/bench/bench.hpp"
#include "apps/common/options.hpp"
#include "base/bytes.hpp"
#include "net/buffer_pool.hpp"
#include "net/secure/crypto.hpp"
#include "net/secure/frame.hpp"
#include "net/tcp/tcp_transport.hpp"

namespace gossiptrain::apps {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace crypto = net::crypto;

struct TransportBenchOptions {
  std::size_t size_mb = 256;
  int runs = 3;
  int handshakes = 50;
  std::size_t frame_kb = 1024;
  net::AeadPreference aead = net::AeadPreference::Auto;
  unsigned crypto_threads = net::default_crypto_threads();
  std::size_t crypto_min_kb = net::kParallelMinMessageBytes / 1024;
  bool json = false;  // the output is one JSON object either way
};

const OptionTable<TransportBenchOptions>& transport_options() {
  using T = TransportBenchOptions;
  using O = Options<T>;
  static const auto table = bench_table<TransportBenchOptions>(
      "one JSON object (the output either way)",
      {
          O::number("size-mb", "N", "message size of the throughput figures, MiB (default 256)",
                    &T::size_mb, 1, 4096),
          O::number("runs", "R", "runs per throughput figure; the best run is reported (default 3)",
                    &T::runs, 1, 100),
          O::number("handshakes", "H", "sequential connects for the handshake figures (default 50)",
                    &T::handshakes, 1, 100000),
          O::number("frame-kb", "K", "channel frame size, KiB (default 1024)", &T::frame_kb, 1,
                    net::kMaxFrameCapBytes / 1024),
          {"aead", "auto|aes256gcm|chacha20poly1305",
           "AEAD of the channel and of the AEAD reference (default auto)",
           [](T& o, const std::string& v) {
             const std::string a = one_of("aead", v, {"auto", "aes256gcm", "chacha20poly1305"});
             o.aead = a == "auto"        ? net::AeadPreference::Auto
                      : a == "aes256gcm" ? net::AeadPreference::Aes256Gcm
                                         : net::AeadPreference::ChaCha20Poly1305;
           }},
          O::number(
              "crypto-threads", "N",
              "threads that seal (sender) and open (receiver) the frames of a large message, "
              "each side (0 or 1: the io thread alone; default min(cores - 1, 4), 1 on 2 cores "
              "or fewer; here " +
                  std::to_string(net::default_crypto_threads()) + ")",
              &T::crypto_threads, 0, net::kMaxCryptoThreads),
          O::number("crypto-min-kb", "K",
                    "messages of at least K KiB use the crypto threads (default " +
                        std::to_string(net::kParallelMinMessageBytes / 1024) + ")",
                    &T::crypto_min_kb, 0, 8u << 20),
      });
  return table;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double mbps(std::size_t bytes, double s) { return double(bytes) / 1e6 / s; }

// CPU seconds used so far by the calling thread.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Wall-clock throughput, and the throughput the same work would reach with each of its threads
// on a core of its own: bytes / the busiest thread's CPU time. The second is what a shared,
// overloaded machine can still measure.
struct Figure {
  double wall_mbps = 0, cpu_mbps = 0;
};

// Plain asio sockets over loopback: one thread writes the buffer, the other reads it into a buffer
// allocated per run (as the channel's receiver allocates each message).
Figure plain_tcp_mbps(const net::Bytes& payload) {
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::ip::tcp::socket client(io), server(io);
  client.connect(acc.local_endpoint());
  acc.accept(server);
  client.set_option(asio::ip::tcp::no_delay(true));
  auto t0 = Clock::now();
  double writer_cpu = 0;
  std::thread writer([&] {
    double c0 = thread_cpu_s();
    const std::size_t kChunk = 1 << 20;
    for (std::size_t off = 0; off < payload.size(); off += kChunk)
      asio::write(client, asio::buffer(payload.data() + off, std::min(kChunk, payload.size() - off)));
    writer_cpu = thread_cpu_s() - c0;
  });
  double c0 = thread_cpu_s();
  // Reserved once and grown per 1 MiB read, exactly as the channel's receiver fills a message.
  net::Bytes in;
  in.reserve(payload.size());
  net::advise_huge_pages(in.data(), payload.size());  // as the channel's receiver does
  const std::size_t kChunk = 1 << 20;
  for (std::size_t off = 0; off < payload.size(); off += kChunk) {
    std::size_t len = std::min(kChunk, payload.size() - off);
    in.resize(off + len);
    asio::read(server, asio::buffer(in.data() + off, len));
  }
  double s = seconds_since(t0);
  double reader_cpu = thread_cpu_s() - c0;
  writer.join();
  if (std::memcmp(in.data(), payload.data(), payload.size()) != 0)
    throw std::runtime_error("plain tcp: payload corrupted");
  return {mbps(payload.size(), s), mbps(payload.size(), std::max(writer_cpu, reader_cpu))};
}

// The AEAD alone on one core, frame by frame: encryption into one frame-sized buffer (what the
// channel's sender does per frame), and decryption of those frames into a message buffer (what
// its receiver does).
struct AeadFigures {
  double encrypt_mbps = 0, decrypt_mbps = 0, encrypt_cpu_mbps = 0;
};
AeadFigures aead_mbps(const net::Bytes& payload, crypto::Aead aead, std::size_t frame) {
  crypto::SymKey key;
  crypto::random_bytes(key.span());
  crypto::AeadCipher c(aead, key);
  std::uint8_t ad[net::kFrameHeaderBytes] = {};
  std::size_t n_frames = (payload.size() + frame - 1) / frame;
  AeadFigures f;
  {
    net::Bytes wire(frame + crypto::kAeadTagBytes);
    auto t0 = Clock::now();
    double c0 = thread_cpu_s();
    for (std::size_t i = 0, off = 0; i < n_frames; ++i, off += frame) {
      std::size_t len = std::min(frame, payload.size() - off);
      c.seal(wire.data(), wire.data() + len, payload.data() + off, len, ad, i);
    }
    f.encrypt_mbps = mbps(payload.size(), seconds_since(t0));
    f.encrypt_cpu_mbps = mbps(payload.size(), thread_cpu_s() - c0);
  }
  net::Bytes sealed(payload.size() + n_frames * crypto::kAeadTagBytes);
  for (std::size_t i = 0, off = 0; i < n_frames; ++i, off += frame) {
    std::size_t len = std::min(frame, payload.size() - off);
    std::uint8_t* out = sealed.data() + off + i * crypto::kAeadTagBytes;
    c.seal(out, out + len, payload.data() + off, len, ad, i);
  }
  net::Bytes plain;
  auto t0 = Clock::now();
  plain.reserve(payload.size());
  net::advise_huge_pages(plain.data(), payload.size());
  for (std::size_t i = 0, off = 0; i < n_frames; ++i, off += frame) {
    std::size_t len = std::min(frame, payload.size() - off);
    plain.resize(off + len);
    const std::uint8_t* in = sealed.data() + off + i * crypto::kAeadTagBytes;
    if (!c.open(plain.data() + off, in, len, in + len, ad, i))
      throw std::runtime_error("aead: decryption failed");
  }
  f.decrypt_mbps = mbps(payload.size(), seconds_since(t0));
  if (plain != payload) throw std::runtime_error("aead: payload corrupted");
  return f;
}

// The receiver's side without the socket: a message's frames, sealed beforehand, fed to a
// FrameReceiver from memory (the copy into its body buffer standing in for the socket read), with
// the transport's crypto threads. What the channel's receiver can reach when the network is
// infinitely fast.
double receiver_alone_mbps(const net::Bytes& payload, crypto::Aead aead, std::size_t frame,
                           unsigned threads, std::size_t min_message_bytes,
                           const std::shared_ptr<net::BufferPool>& buffers) {
  crypto::SymKey key;
  crypto::random_bytes(key.span());
  net::Limits l;
  l.max_frame_bytes = frame;
  l.max_message_bytes = std::max<std::uint64_t>(payload.size(), 1);
  net::FrameSealer sealer(aead, key, l);
  net::Bytes stream, buf(sealer.max_wire_bytes());
  std::uint8_t start[net::kMessageStartBytes] = {1};
  base::put_u64(start + 1, payload.size());
  std::size_t n = sealer.seal(net::FrameType::MessageStart, start, sizeof start, buf.data());
  stream.insert(stream.end(), buf.begin(), buf.begin() + n);
  for (std::size_t off = 0; off < payload.size(); off += frame) {
    n = sealer.seal(net::FrameType::Data, payload.data() + off,
                    std::min(frame, payload.size() - off), buf.data());
    stream.insert(stream.end(), buf.begin(), buf.begin() + n);
  }
  net::FrameReceiver rx(aead, key, l, buffers);
  if (threads > 1)
    rx.set_crypto_pool(std::make_shared<net::CryptoPool>(threads), min_message_bytes);
  auto t0 = Clock::now();
  for (std::size_t off = 0; off < stream.size();) {
    std::size_t body = 0;
    std::string err;
    if (!rx.on_header(stream.data() + off, body, err)) throw std::runtime_error("receiver: " + err);
    off += net::kFrameHeaderBytes;
    std::memcpy(rx.body_buffer(), stream.data() + off, body);
    off += body;
    auto ev = rx.on_body(rx.body_buffer(), body);
    if (ev == net::FrameReceiver::Event::Error) throw std::runtime_error("receiver: " + rx.text());
    if (ev == net::FrameReceiver::Event::Message) {
      double s = seconds_since(t0);
      net::Bytes m = rx.take_message();
      if (m != payload) throw std::runtime_error("receiver: payload corrupted");
      buffers->recycle(std::move(m));  // the next run receives into mapped pages
      return mbps(payload.size(), s);
    }
  }
  throw std::runtime_error("receiver: no message");
}

// Receives messages and connections for the channel figures.
class Sink : public net::TransportHandler {
 public:
  std::mutex mu;
  std::promise<Clock::time_point>* pending = nullptr;
  std::size_t expect_bytes = 0;
  bool ok = true;
  net::BufferPool* buffers = nullptr;  // the receiving transport's
  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr&, std::uint8_t, net::Bytes&& payload) override {
    auto t = Clock::now();
    std::lock_guard lk(mu);
    if (payload.size() != expect_bytes) ok = false;
    if (pending) pending->set_value(t);
    pending = nullptr;
    buffers->recycle(std::move(payload));  // the next run reuses its pages, as an exchange does
  }
  void on_closed(const net::ConnectionPtr&, const net::CloseCause&) override {}
};

net::TcpTransportConfig transport_config(const TransportBenchOptions& o, std::size_t size) {
  net::TcpTransportConfig c;
  c.identity = std::make_shared<net::Identity>(net::Identity::generate());
  c.model_fingerprint = 1;
  c.aead = o.aead;
  c.crypto_threads = o.crypto_threads;
  c.crypto_min_message_bytes = o.crypto_min_kb * 1024;
  c.limits.max_frame_bytes = o.frame_kb * 1024;
  c.limits.max_message_bytes = std::max<std::uint64_t>(size, 1u << 20);
  c.limits.idle_timeout = 60s;
  c.limits.keepalive_interval = 20s;
  return c;
}

net::ConnectionPtr dial(net::TcpTransport& t, const std::string& addr) {
  std::promise<std::pair<net::ConnectionPtr, std::string>> p;
  auto f = p.get_future();
  t.connect(addr, [&p](net::ConnectionPtr c, const net::CloseCause& e) {
    p.set_value({c, e.text()});
  });
  auto [c, e] = f.get();
  if (!c) throw std::runtime_error("connect failed: " + e);
  return c;
}

// A payload of `size` bytes: 1 MiB of random bytes, repeated.
std::shared_ptr<const net::Bytes> make_payload(std::size_t size) {
  net::Bytes data(size);
  crypto::random_bytes(std::span<std::uint8_t>(data.data(), std::min<std::size_t>(size, 1 << 20)));
  for (std::size_t off = 1 << 20; off < size; off += 1 << 20)
    std::memcpy(data.data() + off, data.data(), std::min<std::size_t>(1 << 20, size - off));
  return std::make_shared<const net::Bytes>(std::move(data));
}

// CPU seconds used so far by a transport's io thread.
double io_cpu(net::TcpTransport& t) {
  std::promise<double> p;
  auto f = p.get_future();
  t.post([&p] { p.set_value(thread_cpu_s()); });
  return f.get();
}

// The figures of every run, in MB/s.
struct Runs {
  std::vector<double> plain, enc, dec, chan, plain_cpu, enc_cpu, chan_cpu, rx_alone;
};

// A server and a client transport connected by one channel.
struct Pair {
  Pair(const TransportBenchOptions& o, std::size_t size)
      : server(transport_config(o, size)), client(transport_config(o, size)) {
    server.set_handler(&sink);
    client.set_handler(&client_sink);
    sink.buffers = &server.buffers();
    client_sink.buffers = &client.buffers();
    server.start();
    client.start();
    conn = dial(client, server.listen_addr());
    auto* ch = dynamic_cast<net::Channel*>(conn.get());
    aead = ch ? ch->aead() : crypto::Aead::ChaCha20Poly1305;
  }
  net::TcpTransport server, client;
  Sink sink, client_sink;
  net::ConnectionPtr conn;
  crypto::Aead aead;
};

// One message of `payload` over the channel: wall-clock MB/s, and MB/s of the busier io thread's
// CPU time.
std::pair<double, double> channel_run(Pair& p, const std::shared_ptr<const net::Bytes>& payload) {
  const std::size_t size = payload->size();
  double s0 = io_cpu(p.client), r0 = io_cpu(p.server);
  std::promise<Clock::time_point> done;
  auto f = done.get_future();
  {
    std::lock_guard lk(p.sink.mu);
    p.sink.pending = &done;
    p.sink.expect_bytes = size;
  }
  auto t0 = Clock::now();
  p.client.post([&] {
    if (!p.conn->send(1, payload)) p.sink.ok = false;
  });
  if (f.wait_for(600s) != std::future_status::ready)
    throw std::runtime_error("channel: no message");
  const double wall = mbps(size, std::chrono::duration<double>(f.get() - t0).count());
  double s1 = io_cpu(p.client), r1 = io_cpu(p.server);
  return {wall, mbps(size, std::max(s1 - s0, r1 - r0))};
}

Runs measure_runs(const TransportBenchOptions& o, Pair& p,
                  const std::shared_ptr<const net::Bytes>& payload) {
  Runs r;
  const auto rx_buffers = std::make_shared<net::BufferPool>();
  for (int k = 0; k < o.runs; ++k) {
    auto pf = plain_tcp_mbps(*payload);
    r.plain.push_back(pf.wall_mbps);
    r.plain_cpu.push_back(pf.cpu_mbps);
    auto a = aead_mbps(*payload, p.aead, o.frame_kb * 1024);
    r.enc.push_back(a.encrypt_mbps);
    r.enc_cpu.push_back(a.encrypt_cpu_mbps);
    r.dec.push_back(a.decrypt_mbps);
    auto [wall, cpu] = channel_run(p, payload);
    r.chan.push_back(wall);
    r.chan_cpu.push_back(cpu);
    // After the channel, so that the channel runs after the same steps as before it existed.
    r.rx_alone.push_back(receiver_alone_mbps(*payload, p.aead, o.frame_kb * 1024, o.crypto_threads,
                                             o.crypto_min_kb * 1024, rx_buffers));
  }
  if (!p.sink.ok) throw std::runtime_error("channel: message lost or wrong size");
  return r;
}

struct Handshakes {
  std::vector<double> ms;
  double total_s = 0;
};

// Sequential connects of a fresh client to the server, each closed after.
Handshakes measure_handshakes(const TransportBenchOptions& o, Pair& p, std::size_t size) {
  net::TcpTransport hs_client(transport_config(o, size));
  hs_client.set_handler(&p.client_sink);
  hs_client.start();
  Handshakes h;
  auto h0 = Clock::now();
  for (int i = 0; i < o.handshakes; ++i) {
    auto t0 = Clock::now();
    auto c = dial(hs_client, p.server.listen_addr());
    h.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    hs_client.post([c] { c->close(net::CloseReason::Shutdown, "bench done"); });
  }
  h.total_s = seconds_since(h0);
  hs_client.stop();
  return h;
}

double best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// The figures from CPU time (bytes / busiest thread's CPU seconds): the throughput with every
// thread on an idle core of its own; robust on a shared machine, blind to scheduling. With crypto
// threads the io threads' CPU is no longer the channel's: no CPU-time channel figure.
nlohmann::json cpu_time_figures(const Runs& r, unsigned threads_used) {
  const double cpu_chan = best(r.chan_cpu), cpu_plain = best(r.plain_cpu);
  const double cpu_enc = best(r.enc_cpu), cpu_reference = std::min(cpu_plain, cpu_enc);
  const auto unless_threads = [&](double x) {
    return threads_used > 1 ? nlohmann::json(nullptr) : nlohmann::json(x);
  };
  return {{"channel_mbps", unless_threads(cpu_chan)},
          {"plain_tcp_mbps", cpu_plain},
          {"aead_encrypt_only_1core_mbps", cpu_enc},
          {"reference_mbps", cpu_reference},
          {"ratio", unless_threads(cpu_chan / cpu_reference)}};
}

nlohmann::json report(const TransportBenchOptions& o, const Pair& p, const Runs& r,
                      const Handshakes& h) {
  const double best_plain = best(r.plain), best_enc = best(r.enc), best_dec = best(r.dec);
  const double best_chan = best(r.chan), reference = std::min(best_plain, best_enc);
  // What the receiver could reach with its crypto threads: each opens frames at one core's rate.
  // (The message takes the crypto threads only from crypto_min_message_bytes, and only frames of
  // at least kParallelMinFrameBytes.)
  const unsigned threads = p.server.crypto_threads();
  const std::size_t min_message = p.server.config().crypto_min_message_bytes;
  const unsigned threads_used =
      (o.size_mb << 20) >= min_message && o.frame_kb * 1024 >= net::kParallelMinFrameBytes ? threads
                                                                                           : 1;
  const double reference_threads = std::min(best_plain, best_dec * threads_used);
  nlohmann::json j;
  j["subject"] = "transport";
  j["size_mb"] = o.size_mb;
  j["frame_kb"] = o.frame_kb;
  j["aead"] = crypto::aead_name(p.aead);
  j["runs"] = o.runs;
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["channel_mbps"] = best_chan;
  j["plain_tcp_mbps"] = best_plain;
  j["aead_encrypt_only_1core_mbps"] = best_enc;
  j["aead_decrypt_only_1core_mbps"] = best_dec;
  j["reference_mbps"] = reference;
  j["reference"] = "min(plain_tcp_mbps, aead_encrypt_only_1core_mbps)";
  j["ratio"] = best_chan / reference;
  j["crypto_threads"] = threads;
  j["crypto_min_message_bytes"] = min_message;
  j["crypto_threads_used"] = threads_used;
  j["reference_threads_mbps"] = reference_threads;
  j["reference_threads"] =
      "min(plain_tcp_mbps, aead_decrypt_only_1core_mbps x crypto_threads_used)";
  j["ratio_threads"] = best_chan / reference_threads;
  j["receiver_alone_mbps"] = best(r.rx_alone);
  j["channel_runs_mbps"] = r.chan;
  j["plain_tcp_runs_mbps"] = r.plain;
  j["aead_encrypt_runs_mbps"] = r.enc;
  j["aead_decrypt_runs_mbps"] = r.dec;
  j["receiver_alone_runs_mbps"] = r.rx_alone;
  j["cpu_time_based"] = cpu_time_figures(r, threads_used);
  j["load_average_1min"] = loadavg();
  j["handshakes"] = o.handshakes;
  j["handshake_median_ms"] = median(h.ms);
  j["handshakes_per_s"] = o.handshakes / h.total_s;
  j["note"] =
      "best of runs; channel = send() to on_message of one message between two TcpTransports (own "
      "io threads, crypto_threads workers each) over loopback; sender encrypts, receiver decrypts; "
      "receiver_alone = the receiver fed its frames from "
      "memory; cpu_time_based.channel is null with crypto threads (io threads only)";
  return j;
}

constexpr const char* kAbout =
    "Throughput of the encrypted channel (two TcpTransports in one process) against plain TCP\n"
    "over loopback and the AEAD alone on one core, in the same run; handshake latency and rate.\n"
    "Prints one JSON object; MB/s figures use MB = 10^6 bytes.\n";

int run_transport(const Args& args) {
  TransportBenchOptions o;
  if (auto rc = parse_bench_args("transport", transport_options(), args, o, kAbout)) return *rc;
  // stdout carries only the JSON object.
  spdlog::set_default_logger(spdlog::stderr_color_mt("bench-transport"));
  spdlog::set_level(spdlog::level::warn);
  crypto::init();
  if (o.aead == net::AeadPreference::Aes256Gcm && !crypto::aes256gcm_available()) {
    std::fprintf(stderr, "gossip-bench transport: AES-256-GCM is not available on this CPU\n");
    return 2;
  }
  const std::size_t size = o.size_mb << 20;
  const auto payload = make_payload(size);
  Pair p(o, size);
  const Runs r = measure_runs(o, p, payload);
  const Handshakes h = measure_handshakes(o, p, size);
  std::printf("%s\n", report(o, p, r, h).dump(2).c_str());
  p.client.stop();
  p.server.stop();
  return 0;
}

}  // namespace

GT_BENCH_SUBJECT("transport",
                 "encrypted channel vs plain TCP and the AEAD alone; handshake time and rate",
                 run_transport);

}  // namespace gossiptrain::apps
