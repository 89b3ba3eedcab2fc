// "host:port" addresses as peers write them: parsing, and which of them another machine can dial.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gossiptrain::net {

// Splits "host:port" / "[v6]:port"; false when malformed.
bool split_host_port(const std::string& addr, std::string& host, std::uint16_t& port);

// A host that names "every local interface" when bound (0.0.0.0, ::, and their spellings). On
// Linux, dialling it reaches the local host, so an address with such a host must never be
// announced to other machines.
bool is_wildcard_host(std::string_view host);

// True when addr is well formed, its port is not 0 and its host is not a wildcard: an address
// another machine can dial.
bool dialable_addr(const std::string& addr);

// The address of network interface ifname that peers on other machines can dial (the first IPv4
// one, else the first IPv6 one that is not link-local), for --advertise-interface, as
// NCCL_SOCKET_IFNAME picks NCCL's. Empty when the interface has none; *names gets every
// interface with such an address, for the error message.
std::string interface_address(const std::string& ifname, std::vector<std::string>* names = nullptr);

}  // namespace gossiptrain::net
