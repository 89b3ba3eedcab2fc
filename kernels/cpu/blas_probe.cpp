// The probe: the check of cblas_sgemm against a double-precision reference, the child's side (one
// result line) and the parent's (spawn, read with a deadline, reap, tell a crash from a refusal).
#include "kernels/cpu/blas_probe.hpp"

#include <cblas.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "kernels/cpu/blas_info.hpp"

extern char** environ;

namespace gossiptrain::kernels {
namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
};

// The products of core/model.cpp for mlp:784-256-256-10 at batch 64 (forward X W^T, weight
// gradient dY^T X, input gradient dY W), one conv layer's im2col products, and an odd shape with
// alpha and beta not 1 and 0 that falls on no kernel's block size.
std::vector<Shape> shapes() {
  constexpr int kBatch = 64;
  std::vector<Shape> s;
  const int layers[][2] = {{784, 256}, {256, 256}, {256, 10}};
  for (const auto& l : layers) {
    const int in = l[0], out = l[1];
    s.push_back({false, true, kBatch, out, in, 1.0f, 0.0f});
    s.push_back({true, false, out, in, kBatch, 1.0f, 0.0f});
    s.push_back({false, false, kBatch, in, out, 1.0f, 0.0f});
  }
  s.push_back({false, true, 2 * 196, 64, 288, 1.0f, 0.0f});  // conv 3x3x32 -> 64 on 14x14
  s.push_back({true, false, 64, 288, 2 * 196, 1.0f, 1.0f});  // its weight gradient, accumulated
  s.push_back({false, false, 37, 19, 53, 0.75f, 0.5f});
  return s;
}

// Deterministic values in [-1, 1) (no <random>: the same numbers on every libstdc++).
void fill(std::vector<float>& v, std::uint64_t seed) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = float(double(x >> 40) / double(1ull << 24) * 2.0 - 1.0);
  }
}

// worst |C - ref| / bound for one shape (see GemmCheck).
double check_one(const Shape& s, std::uint64_t seed, bool corrupt) {
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  std::vector<float> a(std::size_t(s.M) * s.K), b(std::size_t(s.K) * s.N),
      c(std::size_t(s.M) * s.N);
  fill(a, seed);
  fill(b, seed + 1);
  fill(c, seed + 2);
  const std::vector<float> c0 = c;
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              s.M, s.N, s.K, s.alpha, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N);
  if (corrupt) c[c.size() / 2] += 0.5f;  // one element off, as a kernel with a wrong edge case
  constexpr double kUnit = 1.0 / double(1 << 24);  // fp32 unit roundoff
  double worst = 0.0;
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      double dot = 0.0, mag = 0.0;
      for (int k = 0; k < s.K; ++k) {
        const double x = a[s.ta ? std::size_t(k) * lda + i : std::size_t(i) * lda + k];
        const double y = b[s.tb ? std::size_t(j) * ldb + k : std::size_t(k) * ldb + j];
        dot += x * y;
        mag += std::fabs(x * y);
      }
      const std::size_t at = std::size_t(i) * s.N + j;
      const double ref = double(s.alpha) * dot + double(s.beta) * c0[at];
      const double bound = (s.K + 2) * kUnit *
                           (std::fabs(double(s.alpha)) * mag + std::fabs(double(s.beta) * c0[at]));
      const float got = c[at];
      if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
      const double err = std::fabs(double(got) - ref);
      worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? 1e30 : 0.0));
    }
  return worst;
}

std::string describe(const Shape& s) {
  std::ostringstream os;
  os << s.M << "x" << s.N << "x" << s.K << (s.ta ? " T" : " N") << (s.tb ? "T" : "N");
  return os.str();
}

// "key=value" from a probe line; "" when absent.
std::string field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  for (std::string w; in >> w;)
    if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
  return "";
}

}  // namespace

GemmCheck check_gemm_shapes(bool corrupt) {
  GemmCheck r;
  std::uint64_t seed = 1;
  for (const Shape& s : shapes()) {
    // The corruption goes into the first shape only: one wrong element must be enough to refuse.
    const double w = check_one(s, seed, corrupt && r.shapes == 0);
    seed += 3;
    ++r.shapes;
    if (r.shape.empty() || w > r.worst) {
      r.worst = w;
      r.shape = describe(s);
    }
  }
  r.ok = r.worst <= 1.0;
  return r;
}

std::optional<std::string> blas_probe_child_report() {
  const char* want = std::getenv(kBlasProbeEnv);
  if (!want) return std::nullopt;
  const char* corrupt = std::getenv(kBlasProbeCorruptEnv);
  // Tests: a core whose kernels use instructions this CPU lacks dies of SIGILL.
  if (corrupt && std::strcmp(corrupt, "crash") == 0) ::raise(SIGILL);
  const GemmCheck c = check_gemm_shapes(corrupt && *corrupt && std::strcmp(corrupt, "0") != 0);
  const BlasInfo info = blas_info();
  std::ostringstream os;
  os.precision(4);
  // The shape holds a space: it goes last, after "shape=".
  os << "gt-blas-probe core=" << (info.core.empty() ? "?" : info.core) << " ok=" << (c.ok ? 1 : 0)
     << " worst=" << c.worst << " shapes=" << c.shapes << " shape=" << c.shape << "\n";
  return os.str();
}

namespace {

// The child's environment: ours, with the core to load and the probe request.
std::vector<std::string> probe_env(const std::string& core) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind("OPENBLAS_CORETYPE=", 0) == 0 || v.rfind("OPENBLAS_VERBOSE=", 0) == 0 ||
        v.rfind(std::string(kBlasProbeEnv) + "=", 0) == 0)
      continue;
    env.emplace_back(v);
  }
  env.push_back("OPENBLAS_CORETYPE=" + core);
  env.push_back(std::string(kBlasProbeEnv) + "=" + core);
  return env;
}

// Reads fd until EOF or the deadline; true when the deadline ended it.
bool read_until(int fd, Clock::time_point deadline, std::string& out) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return true;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, int(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline check above ends the wait
    char buf[512];
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // EOF: the child exited (or closed its output)
    out.append(buf, std::size_t(got));
  }
}

// Starts exe with env, its stdout into *out_fd (stdin and stderr /dev/null); the error text, or
// "" with *pid set.
std::string spawn_probe(const std::string& exe, std::vector<std::string>& env, pid_t* pid,
                        int* out_fd) {
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = exe;
  char* argv[] = {arg0.data(), nullptr};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  // OpenBLAS may print its own complaints (an unknown core): they are not ours to show.
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  const int rc = ::posix_spawn(pid, exe.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return "cannot start " + exe + ": " + std::strerror(rc);
  }
  *out_fd = fds[0];
  return "";
}

// The child's verdict from its output line; "" when it passed on the core asked for.
std::string read_verdict(const std::string& out, int status, const std::string& core,
                         ProbeResult& r) {
  if (WIFSIGNALED(status))
    return "crashed (signal " + std::to_string(WTERMSIG(status)) + ", " +
           ::strsignal(WTERMSIG(status)) + ")";
  const auto line_at = out.find("gt-blas-probe ");
  if (line_at == std::string::npos)
    return "no result (exit code " + std::to_string(WEXITSTATUS(status)) + ")";
  const std::string line = out.substr(line_at, out.find('\n', line_at) - line_at);
  r.core = field(line, "core");
  r.worst = std::strtod(field(line, "worst").c_str(), nullptr);
  if (const auto s = line.find(" shape="); s != std::string::npos) r.shape = line.substr(s + 7);
  // An OPENBLAS_CORETYPE it does not know makes OpenBLAS keep its own choice, silently.
  if (!same_core(r.core, core)) return "OpenBLAS loaded " + r.core + " instead";
  if (field(line, "ok") != "1") return "wrong result";
  return "";
}

}  // namespace

ProbeResult probe_core(const std::string& exe, const std::string& core,
                       std::chrono::milliseconds timeout) {
  ProbeResult r;
  const auto t0 = Clock::now();
  auto done = [&](std::string failure) {
    r.failure = std::move(failure);
    r.ok = r.failure.empty();
    r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return r;
  };
  std::vector<std::string> env = probe_env(core);
  pid_t pid = -1;
  int fd = -1;
  if (std::string err = spawn_probe(exe, env, &pid, &fd); !err.empty()) return done(err);
  std::string out;
  const bool timed_out = read_until(fd, t0 + timeout, out);
  ::close(fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return done("timed out after " + std::to_string(timeout.count()) + " ms");
  return done(read_verdict(out, status, core, r));
}

}  // namespace gossiptrain::kernels
