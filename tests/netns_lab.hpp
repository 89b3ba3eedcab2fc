// Several "machines" on one host for the system tests: one network namespace per host, each with
// its own address on a bridge that lives in a namespace of its own, so peers talk over real TCP
// between different IP addresses and nothing touches the host's own network. Needs root and
// iproute2; everything is removed on destruction.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace gt_test {

class NetnsLab {
 public:
  // Creates hosts 0..n-1 at 10.77.0.(i+1)/24. ok() is false, with why() saying why, when this
  // machine cannot (not root, no `ip`, no namespaces): the test then skips with that message.
  explicit NetnsLab(int n) : tag_("gt" + std::to_string(::getpid())) {
    if (::geteuid() != 0) {
      why_ = "needs root to create network namespaces";
      return;
    }
    if (std::system("command -v ip >/dev/null 2>&1") != 0) {
      why_ = "needs iproute2 (`ip`)";
      return;
    }
    if (!create(n)) why_ = "could not create network namespaces and a bridge (see the test log)";
  }
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;
  ~NetnsLab() {
    for (const auto& ns : created_) sh("ip netns del " + ns);
  }

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  std::string ns(int i) const { return tag_ + "h" + std::to_string(i); }
  std::string ip(int i) const { return "10.77.0." + std::to_string(i + 1); }
  // argv prefix that runs a program on host i.
  std::vector<std::string> exec(int i) const { return {"/usr/sbin/ip", "netns", "exec", ns(i)}; }

 private:
  static bool sh(const std::string& cmd) { return std::system((cmd + " 2>&1").c_str()) == 0; }
  bool add_ns(const std::string& name) {
    if (!sh("ip netns add " + name)) return false;
    created_.insert(created_.begin(), name);  // hosts are deleted before the bridge
    return sh("ip -n " + name + " link set lo up");
  }
  bool create(int n) {
    const std::string br = tag_ + "br";
    if (!add_ns(br) || !sh("ip -n " + br + " link add br0 type bridge") ||
        !sh("ip -n " + br + " link set br0 up"))
      return false;
    for (int i = 0; i < n; ++i) {
      const std::string h = ns(i), port = "p" + std::to_string(i);
      if (!add_ns(h) ||
          !sh("ip -n " + h + " link add eth0 type veth peer name " + port + " netns " + br) ||
          !sh("ip -n " + br + " link set " + port + " master br0 up") ||
          !sh("ip -n " + h + " addr add " + ip(i) + "/24 dev eth0") ||
          !sh("ip -n " + h + " link set eth0 up"))
        return false;
    }
    return true;
  }

  std::string tag_;
  std::string why_;
  std::vector<std::string> created_;
};

}  // namespace gt_test
