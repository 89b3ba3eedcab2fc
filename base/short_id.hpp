// A peer id as logs and error texts show it: its first 8 characters, enough to tell a swarm's
// peers apart (net/, gossip/ and the programs all print ids this one way).
#pragma once

#include <string>
#include <string_view>

namespace gossiptrain::base {

inline std::string short_id(std::string_view id) { return std::string(id.substr(0, 8)); }

}  // namespace gossiptrain::base
