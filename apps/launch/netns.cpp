// gossip-launch --netns: namespaces, bridge, partitions and link shaping (see launch_netns.hpp).
#include "apps/launch/netns.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

extern char** environ;

namespace gossiptrain::apps {

namespace {

constexpr const char* kPrefix = "gt-";
constexpr std::size_t kMaxRunId = 24;

// ---- running commands ----

// Full path of a tool: PATH first, then the sbin folders a non-login root shell may lack.
std::string find_tool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    std::string p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

struct Tools {
  std::string ip, nft, tc;
};
const Tools& tools() {
  static const Tools t{find_tool("ip"), find_tool("nft"), find_tool("tc")};
  return t;
}
// Path of a required tool; throws naming the package when it is missing.
const std::string& tool(const std::string Tools::*which, const char* name, const char* pkg) {
  const std::string& p = tools().*which;
  if (p.empty())
    throw std::runtime_error(std::string("netns: `") + name + "` not found (install " + pkg + ")");
  return p;
}
const std::string& ip_bin() { return tool(&Tools::ip, "ip", "iproute2"); }
const std::string& nft_bin() { return tool(&Tools::nft, "nft", "nftables"); }
const std::string& tc_bin() { return tool(&Tools::tc, "tc", "iproute2"); }

std::string shell_words(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The error text for a failed command: the command, its input if any, its exit and output.
std::string failure(const std::vector<std::string>& argv, const std::string& input,
                    const CommandResult& r) {
  std::string msg = "netns: `" + shell_words(argv) + "`";
  if (!input.empty()) {
    std::string in = trimmed(input);
    if (in.size() > 800) in = in.substr(0, 800) + " ...";
    msg += " with input\n" + in + "\n";
  }
  msg += r.timed_out ? " timed out" : " failed (exit " + std::to_string(r.rc) + ")";
  const std::string out = trimmed(r.output);
  if (!out.empty()) msg += ": " + out;
  return msg;
}

// Runs a command that must succeed; returns its output.
std::string must(const std::vector<std::string>& argv, const std::string& input = "") {
  CommandResult r = run_command(argv, input);
  if (r.rc != 0) throw std::runtime_error(failure(argv, input, r));
  return r.output;
}

// An nft script run inside namespace ns.
std::string nft_in(const std::string& ns, const std::string& script) {
  return must({ip_bin(), "netns", "exec", ns, nft_bin(), "-f", "-"}, script);
}

// Deletes namespaces with one `ip -force -batch`: every one is tried even if one fails.
void delete_namespaces(const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::string script;
  for (const auto& n : names) script += "netns del " + n + "\n";
  must({ip_bin(), "-force", "-batch", "-"}, script);
}

std::vector<std::string> list_namespaces() {
  std::vector<std::string> names;
  std::stringstream ss(must({ip_bin(), "netns", "list"}));
  for (std::string line; std::getline(ss, line);) {
    std::string name = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

void check_run_id(const std::string& id, bool allow_empty) {
  bool ok = (allow_empty || !id.empty()) && id.size() <= kMaxRunId;
  for (char c : id) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok)
    throw std::invalid_argument("netns: run id \"" + id + "\" must be 1 to " +
                                std::to_string(kMaxRunId) + " characters of [A-Za-z0-9_]");
}

// The nft table every host gets: a set of blocked addresses (the partition) and two chains for
// random loss, filled later. Regular chains come first so the base chains can jump to them.
const char* kHostTable = R"(table inet gtnet {
  set blocked { type ipv4_addr; }
  chain loss_in { }
  chain loss_out { }
  chain input {
    type filter hook input priority 0; policy accept;
    ip saddr @blocked counter drop
    jump loss_in
  }
  chain output {
    type filter hook output priority 0; policy accept;
    ip daddr @blocked counter drop
    jump loss_out
  }
}
)";

// tbf arguments for a cap: burst 10 ms of traffic (at least 10 full frames), queue 100 ms.
std::vector<std::string> tbf_args(double rate_mbit) {
  const long long kbit = std::max(8LL, std::llround(rate_mbit * 1000.0));
  const long long burst = std::max(15140LL, kbit * 1000 / 8 / 100);
  return {"root",    "tbf",  "rate", std::to_string(kbit) + "kbit", "burst", std::to_string(burst),
          "latency", "100ms"};
}

// Sum of "packets N" counters in an nft listing.
long long sum_packets(const std::string& listing) {
  long long sum = 0;
  for (std::size_t p = listing.find("packets "); p != std::string::npos;
       p = listing.find("packets ", p + 1))
    sum += std::atoll(listing.c_str() + p + 8);
  return sum;
}

}  // namespace

// ---- run_command ----

namespace {

// stdin for a child: a memory file holding the input (no pipe to fill, no SIGPIPE), or -1.
int input_fd(const std::string& input) {
  int fd = ::memfd_create("gt-input", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (::write(fd, input.data(), input.size()) != static_cast<ssize_t>(input.size()) ||
      ::lseek(fd, 0, SEEK_SET) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads fd to EOF into out; false if the deadline passed first.
bool read_all(int fd, std::string& out, std::chrono::steady_clock::time_point deadline) {
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? false : true;
    ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;
    out.append(buf, static_cast<std::size_t>(got));
  }
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input,
                          double timeout_s) {
  CommandResult r;
  if (argv.empty()) return r;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    r.output = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  const int in = input.empty() ? -1 : input_fd(input);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in >= 0) posix_spawn_file_actions_adddup2(&fa, in, 0);
  else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (in >= 0) ::close(in);
  if (err != 0) {
    ::close(out[0]);
    r.output = "cannot start " + argv[0] + ": " + std::strerror(err);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  if (!read_all(out[0], r.output, deadline)) {
    r.timed_out = true;
    ::kill(pid, SIGKILL);
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!r.timed_out && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  return r;
}

// ---- states ----

nlohmann::json LinkState::to_json() const {
  nlohmann::json j;
  j["rate_mbit"] = rate_mbit ? nlohmann::json(*rate_mbit) : nlohmann::json(nullptr);
  j["loss"] = loss ? nlohmann::json(*loss) : nlohmann::json(nullptr);
  return j;
}

int PartitionState::group_of(int i) const {
  if (groups.empty()) return -1;
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (std::find(groups[g].begin(), groups[g].end(), i) != groups[g].end())
      return static_cast<int>(g);
  return static_cast<int>(groups.size());
}

bool PartitionState::connected(int a, int b) const { return group_of(a) == group_of(b); }

std::vector<int> PartitionState::isolated(int n) const {
  std::vector<int> alone;
  if (!active()) return alone;
  for (int i = 0; i < n; ++i) {
    bool any = false;
    for (int j = 0; j < n && !any; ++j) any = j != i && connected(i, j);
    if (!any) alone.push_back(i);
  }
  return alone;
}

std::string PartitionState::describe() const {
  if (!active()) return "none";
  std::string s;
  for (const auto& g : groups) {
    s += s.empty() ? "[" : " | [";
    for (std::size_t k = 0; k < g.size(); ++k) s += (k ? "," : "") + std::to_string(g[k]);
    s += "]";
  }
  return s + " | rest";
}

nlohmann::json PartitionState::to_json() const { return {{"groups", groups}}; }

// ---- NetnsSwarm ----

NetnsSwarm::NetnsSwarm(std::string run_id, int max_hosts)
    : run_id_(std::move(run_id)), max_hosts_(max_hosts) {
  check_run_id(run_id_, false);
  if (max_hosts_ < 1 || max_hosts_ > kMaxHosts)
    throw std::invalid_argument("netns: max_hosts must be in 1.." + std::to_string(kMaxHosts));
  hosts_.resize(static_cast<std::size_t>(max_hosts_));
  const std::string br = bridge_ns();
  must({ip_bin(), "netns", "add", br});
  created_.push_back(br);
  try {
    must({ip_bin(), "-n", br, "-batch", "-"},
         "link set lo up\nlink add br0 type bridge\nlink set br0 up\n");
  } catch (...) {
    delete_namespaces(created_);
    throw;
  }
}

NetnsSwarm::~NetnsSwarm() {
  std::vector<std::string> order(created_.rbegin(), created_.rend());  // hosts before the bridge
  try {
    delete_namespaces(order);
  } catch (const std::exception& e) {
    spdlog::warn("{} (run `gossip-launch --cleanup` to remove what is left)", e.what());
  }
}

std::string NetnsSwarm::bridge_ns() const { return kPrefix + run_id_ + "-br"; }
std::string NetnsSwarm::ns(int i) const { return kPrefix + run_id_ + "-h" + std::to_string(i); }

std::string NetnsSwarm::address(int i) {
  return "10.88." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
}

std::vector<std::string> NetnsSwarm::exec_prefix(int i) const {
  return {ip_bin(), "netns", "exec", ns(i)};
}

bool NetnsSwarm::has_host(int i) const {
  return i >= 0 && i < max_hosts_ && hosts_[static_cast<std::size_t>(i)].exists;
}

std::vector<int> NetnsSwarm::hosts() const {
  std::vector<int> v;
  for (int i = 0; i < max_hosts_; ++i)
    if (has_host(i)) v.push_back(i);
  return v;
}

void NetnsSwarm::check_host(int i, const char* what) const {
  if (!has_host(i))
    throw std::invalid_argument(std::string("netns: ") + what + ": no host " + std::to_string(i));
}

void NetnsSwarm::add_host(int i) {
  if (i < 0 || i >= max_hosts_)
    throw std::invalid_argument("netns: host " + std::to_string(i) + " outside 0.." +
                                std::to_string(max_hosts_ - 1));
  if (has_host(i)) return;
  const std::string h = ns(i);
  must({ip_bin(), "netns", "add", h});
  try {
    create_host(i);
  } catch (...) {
    try {
      delete_namespaces({h});  // takes its veth, and so the bridge port, with it
    } catch (const std::exception& e) {
      spdlog::warn("{}", e.what());
    }
    throw;
  }
  created_.push_back(h);
  hosts_[static_cast<std::size_t>(i)].exists = true;
}

// Host i's namespace exists: its veth to the bridge, address, nft table and partition.
void NetnsSwarm::create_host(int i) {
  const std::string h = ns(i), port = "p" + std::to_string(i);
  must({ip_bin(), "-n", h, "-batch", "-"}, "link set lo up\nlink add eth0 type veth peer name " +
                                               port + " netns " + bridge_ns() + "\naddr add " +
                                               ip(i) + "/16 dev eth0\nlink set eth0 up\n");
  must({ip_bin(), "-n", bridge_ns(), "link", "set", port, "master", "br0", "up"});
  nft_in(h, kHostTable);
  if (partition_.active()) apply_partition(i);
}

// ---- faults ----

void NetnsSwarm::partition(const std::vector<std::vector<int>>& groups) {
  std::set<int> seen;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (int i : groups[g]) {
      if (i < 0 || i >= max_hosts_)
        throw std::invalid_argument("netns: partition: host " + std::to_string(i) + " outside 0.." +
                                    std::to_string(max_hosts_ - 1));
      if (!seen.insert(i).second)
        throw std::invalid_argument("netns: partition: host " + std::to_string(i) +
                                    " is in two groups");
    }
  partition_.groups = groups;
  partition_.groups.erase(std::remove_if(partition_.groups.begin(), partition_.groups.end(),
                                         [](const std::vector<int>& g) { return g.empty(); }),
                          partition_.groups.end());
  for (int i : hosts()) apply_partition(i);
}

void NetnsSwarm::heal() {
  if (!partition_.active()) return;
  partition_.groups.clear();
  for (int i : hosts()) apply_partition(i);
}

// Host i's blocked set: every address (of hosts existing or still to come) outside its group.
void NetnsSwarm::apply_partition(int i) {
  std::string elems;
  for (int j = 0; j < max_hosts_ && partition_.active(); ++j)
    if (j != i && !partition_.connected(i, j)) elems += (elems.empty() ? "" : ", ") + ip(j);
  std::string script = "flush set inet gtnet blocked\n";
  if (!elems.empty()) script += "add element inet gtnet blocked { " + elems + " }\n";
  nft_in(ns(i), script);
}

void NetnsSwarm::set_link(int i, std::optional<double> rate_mbit, std::optional<double> loss) {
  check_host(i, "set_link");
  if (rate_mbit && !(*rate_mbit > 0.0 && std::isfinite(*rate_mbit)))
    throw std::invalid_argument("netns: set_link: rate_mbit must be > 0");
  if (loss && !(*loss >= 0.0 && *loss <= 1.0))
    throw std::invalid_argument("netns: set_link: loss must be in [0,1]");
  LinkState& st = hosts_[static_cast<std::size_t>(i)].link;
  if (rate_mbit != st.rate_mbit) {
    apply_rate(i, rate_mbit);
    st.rate_mbit = rate_mbit;
  }
  if (loss != st.loss) {
    apply_loss(i, loss);
    st.loss = loss;
  }
}

LinkState NetnsSwarm::link(int i) const {
  check_host(i, "link");
  return hosts_[static_cast<std::size_t>(i)].link;
}

// A tbf on both ends of host i's veth, or none.
void NetnsSwarm::apply_rate(int i, std::optional<double> rate_mbit) {
  const std::string port = "p" + std::to_string(i);
  const std::pair<std::string, std::string> ends[] = {{ns(i), "eth0"}, {bridge_ns(), port}};
  for (const auto& [where, dev] : ends) {
    std::vector<std::string> argv = {tc_bin(), "-n", where, "qdisc"};
    if (rate_mbit) {
      argv.insert(argv.end(), {"replace", "dev", dev});
      for (auto& a : tbf_args(*rate_mbit)) argv.push_back(a);
    } else {
      argv.insert(argv.end(), {"del", "dev", dev, "root"});
    }
    must(argv);
  }
}

void NetnsSwarm::apply_loss(int i, std::optional<double> loss) {
  std::string script = "flush chain inet gtnet loss_in\nflush chain inet gtnet loss_out\n";
  const long long per_mille = loss ? std::llround(*loss * 1000.0) : 0;
  if (per_mille > 0) {
    const std::string cond = " numgen random mod 1000 < " + std::to_string(per_mille);
    script += "add rule inet gtnet loss_in iifname \"eth0\"" + cond + " counter drop\n";
    script += "add rule inet gtnet loss_out oifname \"eth0\"" + cond + " counter drop\n";
  }
  nft_in(ns(i), script);
}

long long NetnsSwarm::loss_drops(int i) const {
  check_host(i, "loss_drops");
  long long n = 0;
  for (const char* chain : {"loss_in", "loss_out"})
    n += sum_packets(must(
        {ip_bin(), "netns", "exec", ns(i), nft_bin(), "list", "chain", "inet", "gtnet", chain}));
  return n;
}

// ---- static helpers ----

int NetnsSwarm::cleanup_stale(const std::string& run_id) {
  check_run_id(run_id, true);
  const std::string prefix = run_id.empty() ? kPrefix : kPrefix + run_id + "-";
  std::vector<std::string> doomed;
  for (const auto& n : list_namespaces())
    if (n.rfind(prefix, 0) == 0) doomed.push_back(n);
  // Hosts before bridges, so no veth outlives its bridge even for a moment.
  std::stable_partition(doomed.begin(), doomed.end(), [](const std::string& n) {
    return n.size() < 3 || n.compare(n.size() - 3, 3, "-br") != 0;
  });
  delete_namespaces(doomed);
  return static_cast<int>(doomed.size());
}

std::string NetnsSwarm::make_run_id() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%x%04x", static_cast<unsigned>(::getpid()), rd() & 0xffffu);
  return buf;
}

bool NetnsSwarm::check_available(std::string* why) {
  auto no = [&](std::string msg) {
    if (why) *why = "--netns unavailable: " + msg;
    return false;
  };
  if (::geteuid() != 0) return no("needs root (network namespaces, nftables, tc)");
  if (tools().ip.empty()) return no("`ip` not found (install iproute2)");
  if (tools().tc.empty()) return no("`tc` not found (install iproute2)");
  if (tools().nft.empty()) return no("`nft` not found (install nftables)");
  const std::string probe = std::string(kPrefix) + "probe" + make_run_id();
  try {
    must({ip_bin(), "netns", "add", probe});
  } catch (const std::exception& e) {
    return no(e.what());
  }
  std::string err;
  try {
    must({ip_bin(), "-n", probe, "-batch", "-"},
         "link set lo up\nlink add br0 type bridge\nlink add v0 type veth peer name v1\n"
         "link set v1 master br0\nlink set v0 up\n");
    must({tc_bin(), "-n", probe, "qdisc", "replace", "dev", "v0", "root", "tbf", "rate", "8mbit",
          "burst", "15140", "latency", "100ms"});
    nft_in(probe, std::string(kHostTable) +
                      "add rule inet gtnet loss_in numgen random mod 1000 < 500 counter drop\n");
  } catch (const std::exception& e) {
    err = e.what();
  }
  try {
    delete_namespaces({probe});
  } catch (const std::exception& e) {
    if (err.empty()) err = e.what();
  }
  return err.empty() ? true : no(err);
}

}  // namespace gossiptrain::apps
