#include "net/address.hpp"

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

}  // namespace gossiptrain::net
