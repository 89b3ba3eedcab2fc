// The parts of apps/common/option_table.hpp that do not depend on the configuration type.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "apps/common/option_table.hpp"
#include "net/socket/address.hpp"

namespace gossiptrain::apps {

Flag split_flag(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'");
  Flag f;
  f.name = arg.substr(2);
  if (auto eq = f.name.find('='); eq != std::string::npos) {
    f.value = f.name.substr(eq + 1);
    f.name = f.name.substr(0, eq);
    f.has_value = true;
  }
  return f;
}

UsageError bad_value(const std::string& flag, const std::string& v, const std::string& want) {
  return UsageError("--" + flag + ": bad value '" + v + "' (" + want + ")");
}

std::string join_choices(const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
  return list;
}

std::string one_of(const std::string& flag, const std::string& v,
                   const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (v == a) return v;
  throw bad_value(flag, v, "one of " + join_choices(allowed));
}

long long to_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  long long x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    throw bad_value(flag, v, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

long long to_int_or(const std::string& flag, const std::string& v, const std::string& word,
                    long long word_value, long long lo, long long hi) {
  return v == word ? word_value : to_int(flag, v, lo, hi);
}

double to_double(const std::string& flag, const std::string& v, double lo, double hi) {
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream os;
    os << "a number in [" << lo << ", " << hi << "]";
    throw bad_value(flag, v, os.str());
  }
  return x;
}

void check_host_port(const std::string& addr, const std::string& flag, AddrUse use) {
  std::string host;
  std::uint16_t port = 0;
  if (!net::split_host_port(addr, host, port))
    throw bad_value(flag, addr, "HOST:PORT with a port in 0..65535");
  if (use == AddrUse::Dial && !net::dialable_addr(addr))
    throw UsageError("--" + flag + " " + addr +
                     ": not an address another machine can dial (a wildcard host such as "
                     "0.0.0.0 or ::, or port 0); give this machine's own address, e.g. "
                     "10.0.0.1:7000");
}

std::vector<std::string> parse_addr_list(const std::string& s, const std::string& flag) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string a; std::getline(ss, a, ',');) {
    if (a.empty()) continue;
    check_host_port(a, flag, AddrUse::Dial);
    out.push_back(a);
  }
  if (out.empty()) throw bad_value(flag, s, "HOST:PORT,...");
  return out;
}

namespace {
// Edit distance with insertions, deletions, substitutions and swaps of two neighbours (the
// optimal string alignment distance): "bacth" is one edit from "batch".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
}  // namespace

std::string nearest_name(const std::string& given, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_d = 0;
  for (const auto& n : names) {
    const std::size_t d = edit_distance(given, n);
    if (best.empty() || d < best_d) {
      best = n;
      best_d = d;
    }
  }
  if (best.empty() || best_d == 0) return "";
  const std::size_t longer = std::max(given.size(), best.size());
  return best_d <= 2 && best_d * 3 < longer ? best : "";
}

UsageError unknown_flag(const std::string& given, const std::vector<std::string>& names) {
  const std::string near = nearest_name(given, names);
  return UsageError("unknown flag '--" + given + "'" +
                    (near.empty() ? "" : "; did you mean '--" + near + "'?") + " (see --help)");
}

std::string help_line(const std::string& flag, const std::string& help, std::size_t column) {
  constexpr std::size_t kWidth = 100;
  std::string s = "  " + flag;
  if (s.size() + 1 > column) s += "\n" + std::string(column, ' ');
  else s += std::string(column - s.size(), ' ');
  std::size_t line = column;  // characters on the current line
  std::istringstream words(help);
  bool first = true;
  for (std::string w; words >> w; first = false) {
    if (!first && line + 1 + w.size() > kWidth) {
      s += "\n" + std::string(column, ' ');
      line = column;
    } else if (!first) {
      s += ' ';
      ++line;
    }
    s += w;
    line += w.size();
  }
  return s + "\n";
}

}  // namespace gossiptrain::apps
