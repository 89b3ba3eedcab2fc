#include "net/socket/address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>

namespace gossiptrain::net {

bool split_host_port(const std::string& addr, std::string& host, std::uint16_t& port) {
  std::string p;
  if (!addr.empty() && addr[0] == '[') {
    auto close = addr.find(']');
    if (close == std::string::npos || close + 1 >= addr.size() || addr[close + 1] != ':')
      return false;
    host = addr.substr(1, close - 1);
    p = addr.substr(close + 2);
  } else {
    auto colon = addr.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    host = addr.substr(0, colon);
    if (host.find(':') != std::string::npos) return false;
    p = addr.substr(colon + 1);
  }
  if (p.empty() || p.size() > 5 || host.empty()) return false;
  unsigned v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + unsigned(c - '0');
  }
  if (v > 65535) return false;
  port = static_cast<std::uint16_t>(v);
  return true;
}

bool is_wildcard_host(std::string_view host) {
  if (host == "*" || host == "0") return true;
  // IPv4 0.0.0.0, or an IPv6 address made only of zeros, colons and dots (::, 0::0, ::0.0.0.0).
  if (host.empty()) return false;
  for (char c : host) {
    if (c != '0' && c != '.' && c != ':') return false;
  }
  return host.find_first_of("0:") != std::string_view::npos;
}

bool dialable_addr(const std::string& addr) {
  std::string host;
  std::uint16_t port = 0;
  return split_host_port(addr, host, port) && port != 0 && !is_wildcard_host(host);
}

std::string interface_address(const std::string& ifname, std::vector<std::string>* names) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    const int fam = a->ifa_addr->sa_family;
    if (fam == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    } else if (fam == AF_INET6) {
      const auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    if (names && std::find(names->begin(), names->end(), a->ifa_name) == names->end())
      names->push_back(a->ifa_name);
    if (ifname != a->ifa_name) continue;
    if (fam == AF_INET && v4.empty()) v4 = buf;
    if (fam == AF_INET6 && v6.empty()) v6 = std::string("[") + buf + "]";
  }
  ::freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

}  // namespace gossiptrain::net
