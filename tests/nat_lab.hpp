// Peers behind NAT on one host (docs/nat.md): an "internet" bridge with reachable hosts, and sites,
// each a router namespace that masquerades (nftables) for a private LAN bridge of hosts. A LAN host
// reaches the internet through its router; nothing on the internet (nor another site) can dial it.
// Needs root, iproute2, nftables and sysctl; everything is removed on destruction.
//
//   internet 10.88.0.0/24: public host i at 10.88.0.(i+1), router of site s at 10.88.0.(101+s)
//   site s LAN 10.88.(s+1).0/24: router 10.88.(s+1).1, LAN host j at 10.88.(s+1).(j+2)
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace gt_test {

class NatLab {
 public:
  NatLab(int public_hosts, int sites, int hosts_per_site)
      : tag_("gtnat" + std::to_string(::getpid())), pub_(public_hosts), sites_(sites),
        per_site_(hosts_per_site) {
    if (::geteuid() != 0) {
      why_ = "needs root to create network namespaces";
      return;
    }
    for (const char* tool : {"ip", "nft", "sysctl"})
      if (std::system(("command -v " + std::string(tool) + " >/dev/null 2>&1").c_str()) != 0) {
        why_ = std::string("needs `") + tool + "` (iproute2, nftables, procps)";
        return;
      }
    if (!create()) why_ = "could not create the NAT namespaces (see the test log)";
  }
  NatLab(const NatLab&) = delete;
  NatLab& operator=(const NatLab&) = delete;
  ~NatLab() {
    for (const auto& ns : created_) sh("ip netns del " + ns);
    if (!rules_.empty()) std::remove(rules_.c_str());
  }

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  std::string tag() const { return tag_; }
  // Hosts are numbered: 0..P-1 public, then site 0's LAN hosts, then site 1's, ...
  int hosts() const { return pub_ + sites_ * per_site_; }
  bool is_public(int h) const { return h < pub_; }
  int site_of(int h) const { return h < pub_ ? -1 : (h - pub_) / per_site_; }
  std::string ns(int h) const { return tag_ + "h" + std::to_string(h); }
  std::string ip(int h) const {
    if (h < pub_) return "10.88.0." + std::to_string(h + 1);
    const int s = site_of(h), j = (h - pub_) % per_site_;
    return "10.88." + std::to_string(s + 1) + "." + std::to_string(j + 2);
  }
  std::vector<std::string> exec(int h) const { return {"/usr/sbin/ip", "netns", "exec", ns(h)}; }

 private:
  static bool sh(const std::string& cmd) { return std::system((cmd + " 2>&1").c_str()) == 0; }
  bool add_ns(const std::string& name) {
    if (!sh("ip netns add " + name)) return false;
    created_.insert(created_.begin(), name);  // deleted in reverse order of creation
    return sh("ip -n " + name + " link set lo up");
  }
  // A veth: `ifname` in `host`, `port` in `sw`, enslaved to bridge `br` there.
  bool wire(const std::string& host, const std::string& ifname, const std::string& sw,
            const std::string& port, const std::string& br) {
    return sh("ip -n " + host + " link add " + ifname + " type veth peer name " + port + " netns " +
              sw) &&
           sh("ip -n " + sw + " link set " + port + " master " + br + " up") &&
           sh("ip -n " + host + " link set " + ifname + " up");
  }
  bool create() {
    const std::string inet = tag_ + "inet";
    if (!add_ns(inet) || !sh("ip -n " + inet + " link add br0 type bridge") ||
        !sh("ip -n " + inet + " link set br0 up"))
      return false;
    for (int h = 0; h < pub_; ++h)
      if (!add_ns(ns(h)) || !wire(ns(h), "eth0", inet, "p" + std::to_string(h), "br0") ||
          !sh("ip -n " + ns(h) + " addr add " + ip(h) + "/24 dev eth0"))
        return false;
    rules_ = "/tmp/" + tag_ + ".nft";
    {
      std::ofstream f(rules_);
      f << "table ip nat {\n  chain post {\n    type nat hook postrouting priority 100;\n"
           "    oifname \"eth0\" masquerade\n  }\n}\n"
           "table ip filter {\n  chain lanout {\n"
           "    type filter hook forward priority 0; policy drop;\n"
           "    ct state established,related accept\n"
           "    iifname \"lan\" oifname \"lan\" accept\n"
           "    iifname \"lan\" oifname \"eth0\" accept\n  }\n}\n";
    }
    for (int s = 0; s < sites_; ++s) {
      const std::string r = tag_ + "r" + std::to_string(s);
      const std::string net = "10.88." + std::to_string(s + 1) + ".";
      if (!add_ns(r) || !wire(r, "eth0", inet, "r" + std::to_string(s), "br0") ||
          !sh("ip -n " + r + " addr add 10.88.0." + std::to_string(101 + s) + "/24 dev eth0") ||
          !sh("ip -n " + r + " link add lan type bridge") || !sh("ip -n " + r + " link set lan up") ||
          !sh("ip -n " + r + " addr add " + net + "1/24 dev lan") ||
          !sh("ip netns exec " + r + " sysctl -qw net.ipv4.ip_forward=1") ||
          !sh("ip netns exec " + r + " nft -f " + rules_))
        return false;
      for (int j = 0; j < per_site_; ++j) {
        const int h = pub_ + s * per_site_ + j;
        if (!add_ns(ns(h)) || !wire(ns(h), "eth0", r, "l" + std::to_string(j), "lan") ||
            !sh("ip -n " + ns(h) + " addr add " + ip(h) + "/24 dev eth0") ||
            !sh("ip -n " + ns(h) + " route add default via " + net + "1"))
          return false;
      }
    }
    return true;
  }

  std::string tag_;
  int pub_, sites_, per_site_;
  std::string why_;
  std::string rules_;
  std::vector<std::string> created_;
};

}  // namespace gt_test
