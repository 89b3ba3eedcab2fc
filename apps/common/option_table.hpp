// One table of options per command line: it drives parsing (--name value, --name=value), --help
// (grouped, each option with its default read from a default-constructed config) and, for
// gossip-peer, the keys of a --config JSON file. Every bad flag or value is a UsageError naming
// the flag, an unknown one with the nearest known name; the apps print it and exit with code 2.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gossiptrain::apps {

// Bad flags or values: the app prints the message and exits with code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A command-line flag split into its name (without "--") and value: "--name=value" or "--name".
struct Flag {
  std::string name;
  std::string value;
  bool has_value = false;  // the value was given after '='
};
// Throws UsageError for an argument that does not start with "--".
Flag split_flag(const std::string& arg);

// "--flag: bad value 'v' (want)".
UsageError bad_value(const std::string& flag, const std::string& v, const std::string& want);
// v when it is one of `allowed`; UsageError listing them otherwise.
std::string one_of(const std::string& flag, const std::string& v,
                   const std::vector<std::string>& allowed);
// "a|b|c".
std::string join_choices(const std::vector<std::string>& allowed);
// A flag's value as an integer in [lo, hi] or a finite number in [lo, hi]; UsageError otherwise,
// naming the flag (without "--") and the accepted range.
long long to_int(const std::string& flag, const std::string& v, long long lo, long long hi);
double to_double(const std::string& flag, const std::string& v, double lo, double hi);
// to_int, or `word_value` when v is `word` ("auto").
long long to_int_or(const std::string& flag, const std::string& v, const std::string& word,
                    long long word_value, long long lo, long long hi);

// What a HOST:PORT is for. A listen address may have port 0 (any free port) and a wildcard host;
// an address others dial may not.
enum class AddrUse { Listen, Dial };
// The one check of a HOST:PORT flag value ("[v6]:port" too, as net::split_host_port reads it).
void check_host_port(const std::string& addr, const std::string& flag, AddrUse use);
// Splits "a:1,b:2" and checks each as an address to dial; UsageError when none is given.
std::vector<std::string> parse_addr_list(const std::string& s, const std::string& flag);

// The known name closest to `given` by edit distance, when it is close enough to be a typo (at
// most 2 edits, and fewer than a third of the longer name); "" otherwise.
std::string nearest_name(const std::string& given, const std::vector<std::string>& names);
// "unknown flag '--given'; did you mean '--near'? (see --help)", the suggestion only when close.
UsageError unknown_flag(const std::string& given, const std::vector<std::string>& names);

// A default value as --help shows it: numbers in their shortest form, durations in seconds.
template <class T>
std::string show_value(const T& x) {
  if constexpr (std::is_same_v<T, bool>) return x ? "on" : "off";
  else if constexpr (std::is_integral_v<T>) return std::to_string(x);
  else if constexpr (std::is_same_v<T, std::string>) return x;
  else {
    std::ostringstream os;
    if constexpr (std::is_floating_point_v<T>) os << x;
    else os << std::chrono::duration<double>(x).count();  // a std::chrono::duration
    return os.str();
  }
}

// What JSON type a --config key takes: a string where a number is expected is refused, as a
// bool is, naming the key and the type.
enum class ValueKind {
  Any,           // a string or a number, read as its text
  Text,          // a string
  Number,        // a number
  NumberOrWord,  // a number, or a string that is not one ("auto", "off")
  Switch,        // true (the flag given) or false (not given)
};

// How many values an option takes.
enum class Arity {
  One,   // --name VALUE or --name=VALUE
  None,  // a switch: --name; set() gets ""
  Many,  // --name V1 V2 ...: the following arguments up to the next "--flag", one set() each
};

// The programs that take an option of a shared table, a bit set (as llama.cpp's common/arg.cpp
// tags each argument with the examples that take it): gossip-peer's table holds every peer flag,
// and gossip-sim and the Python binding take the ones tagged for them from that one table.
enum Program : unsigned {
  kGossipPeer = 1u,  // gossip-peer (and gossip-launch, which passes them through)
  kGossipSim = 2u,   // gossip-sim --workload train: a simulated peer's flags
  kPythonPeer = 4u,  // gossiptrain.Peer(args): the binding's peer, which does not train
};

template <class Config>
struct Option {
  std::string name;  // without the leading dashes
  std::string arg;   // the value's placeholder in --help; empty for a switch
  std::string help;
  std::function<void(Config&, const std::string&)> set;
  Arity arity = Arity::One;
  // The option's value when not given, read from a default-constructed Config for --help; "" or
  // no function: `unset` says what not giving it means ("off", "required").
  std::function<std::string(Config&)> show;
  std::string unset;
  ValueKind kind = ValueKind::Any;
  unsigned programs = kGossipPeer;  // Program bits: who takes it

  // For a table row: the default shown by `f`, what an unset option means, the --config type.
  Option shows(std::function<std::string(Config&)> f) && {
    show = std::move(f);
    return std::move(*this);
  }
  Option unset_means(std::string why) && {
    unset = std::move(why);
    return std::move(*this);
  }
  Option of_kind(ValueKind k) && {
    kind = k;
    return std::move(*this);
  }
  Option for_programs(unsigned p) && {
    programs = p;
    return std::move(*this);
  }
  bool for_program(Program p) const { return (programs & p) != 0; }
  // What --help prints after the help text: "default: 10", or "" for a switch.
  std::string default_text(Config& defaults) const {
    if (arity == Arity::None) return "";
    std::string s = show ? show(defaults) : "";
    return s.empty() ? unset : s;
  }
};

// The field's value, shown (show_value) from a default-constructed config.
template <class Config, class Field>
std::function<std::string(Config&)> show_field(Field field) {
  return [field](Config& c) { return show_value(std::invoke(field, c)); };
}

// Options that set one field of the config from the value: `field` is a member pointer, or a
// callable that returns a reference to the field (std::invoke). In a table: using O = Options<C>.
// A field of a struct within the config, (c.*part).*field: a Field for the Options below.
template <class Config, class Part, class T>
auto field_of(Part Config::*part, T Part::*field) {
  return [part, field](Config& c) -> T& { return (c.*part).*field; };
}

template <class Config>
struct Options {
  template <class Field>
  static Option<Config> text(std::string name, std::string arg, std::string help, Field field) {
    auto set = [field](Config& c, const std::string& v) { std::invoke(field, c) = v; };
    return Option<Config>{std::move(name), std::move(arg), std::move(help), set}
        .shows(show_field<Config>(field))
        .unset_means("none")
        .of_kind(ValueKind::Text);
  }
  // An integer field takes an integer in [lo, hi], a floating-point one a finite number in it.
  template <class Field>
  static Option<Config> number(std::string name, std::string arg, std::string help, Field field,
                               double lo, double hi) {
    auto set = [name, field, lo, hi](Config& c, const std::string& v) {
      auto& x = std::invoke(field, c);
      using T = std::remove_reference_t<decltype(x)>;
      if constexpr (std::is_integral_v<T>)
        x = static_cast<T>(to_int(name, v, static_cast<long long>(lo), static_cast<long long>(hi)));
      else x = static_cast<T>(to_double(name, v, lo, hi));
    };
    return Option<Config>{name, std::move(arg), std::move(help), set}
        .shows(show_field<Config>(field))
        .of_kind(ValueKind::Number);
  }
  // number() for an integer field that also takes `word` ("auto") for word_value; --help shows
  // ARG|WORD.
  template <class Field>
  static Option<Config> number_or(std::string name, const std::string& arg, std::string word,
                                  long long word_value, std::string help, Field field, long long lo,
                                  long long hi) {
    auto set = [name, word, word_value, field, lo, hi](Config& c, const std::string& v) {
      auto& x = std::invoke(field, c);
      x = static_cast<std::remove_reference_t<decltype(x)>>(
          to_int_or(name, v, word, word_value, lo, hi));
    };
    auto show = [field, word, word_value](Config& c) {
      const auto x = std::invoke(field, c);
      return static_cast<long long>(x) == word_value ? word : show_value(x);
    };
    return Option<Config>{name, arg + "|" + word, std::move(help), set}.shows(show).of_kind(
        ValueKind::NumberOrWord);
  }
  // A duration: a number of SECONDS in [lo, hi] (at most a day unless told), into a floating-point
  // field in seconds or a std::chrono::duration.
  template <class Field>
  static Option<Config> seconds(std::string name, std::string help, Field field, double lo,
                                double hi = 86400) {
    auto set = [name, field, lo, hi](Config& c, const std::string& v) {
      const double s = to_double(name, v, lo, hi);
      auto& x = std::invoke(field, c);
      using T = std::remove_reference_t<decltype(x)>;
      if constexpr (std::is_floating_point_v<T>) x = s;
      else x = std::chrono::duration_cast<T>(std::chrono::duration<double>(s));
    };
    return Option<Config>{name, "SECONDS", std::move(help), set}
        .shows(show_field<Config>(field))
        .of_kind(ValueKind::Number);
  }
  // The value must be one of `allowed`; --help shows them as the placeholder.
  template <class Field>
  static Option<Config> choice(std::string name, std::vector<std::string> allowed, std::string help,
                               Field field) {
    std::string arg = join_choices(allowed);
    // The default: the allowed name that reads as the field's value.
    auto show = [allowed, field](Config& c) -> std::string {
      const auto& x = std::invoke(field, c);
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::string>) return x;
      else {
        for (const auto& a : allowed) {
          T t{};
          from_string(a, t);
          if (t == x) return a;
        }
        return "";
      }
    };
    auto set = [name, allowed = std::move(allowed), field](Config& c, const std::string& v) {
      auto& dst = std::invoke(field, c);
      std::string text = one_of(name, v, allowed);
      if constexpr (std::is_same_v<std::decay_t<decltype(dst)>, std::string>) dst = std::move(text);
      else from_string(text, dst);  // an enum's reader, found by argument-dependent lookup
    };
    return Option<Config>{name, std::move(arg), std::move(help), set}
        .shows(show)
        .unset_means("none")
        .of_kind(ValueKind::Text);
  }
  // A choice for a field that is neither a string nor an enum with a from_string: the field gets
  // the value paired with the name given. In a table: O::named<T>(...).
  template <class T, class Field>
  static Option<Config> named(std::string name, std::vector<std::pair<std::string, T>> values,
                              std::string help, Field field) {
    std::vector<std::string> names;
    for (const auto& nv : values) names.push_back(nv.first);
    std::string arg = join_choices(names);
    auto show = [values, field](Config& c) -> std::string {
      for (const auto& [n, value] : values)
        if (std::invoke(field, c) == value) return n;
      return "";
    };
    auto set = [name, names, values = std::move(values), field](Config& c, const std::string& v) {
      const std::string given = one_of(name, v, names);
      for (const auto& [n, value] : values)
        if (n == given) std::invoke(field, c) = value;
    };
    return Option<Config>{name, std::move(arg), std::move(help), set}.shows(show).of_kind(
        ValueKind::Text);
  }
  // A switch that sets a bool field to `value`.
  template <class Field>
  static Option<Config> flag(std::string name, std::string help, Field field, bool value = true) {
    auto set = [field, value](Config& c, const std::string&) { std::invoke(field, c) = value; };
    return Option<Config>{std::move(name), "", std::move(help), set, Arity::None}.of_kind(
        ValueKind::Switch);
  }
};

// "  --name ARG" padded to `column`, then `help` wrapped at 100 columns, indented to `column`.
std::string help_line(const std::string& flag, const std::string& help, std::size_t column);

// A heading of --help and the options under it, by name, in order.
struct HelpGroup {
  std::string heading;
  std::vector<std::string> names;
};

template <class Config>
class OptionTable {
 public:
  // A flag not in the table, with its value (the next argument unless given after '='; "" when it
  // is the last argument).
  using Unknown = std::function<void(Config&, const std::string& name, const std::string& value)>;

  explicit OptionTable(std::vector<Option<Config>> options) : options_(std::move(options)) {}

  const std::vector<Option<Config>>& options() const { return options_; }
  const Option<Config>* find(const std::string& name) const {
    for (const auto& o : options_)
      if (o.name == name) return &o;
    return nullptr;
  }

  // Applies args (without argv[0]) to c in their order. Stops and returns false at --help or -h.
  // A flag not in the table goes to `unknown` when given, else it is a UsageError.
  bool parse(const std::vector<std::string>& args, Config& c, const Unknown& unknown = {}) const {
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--help" || args[i] == "-h") return false;
      Flag f = split_flag(args[i]);
      const Option<Config>* o = find(f.name);
      if (!o && !unknown) throw unknown_flag(f.name, names());
      const Arity arity = o ? o->arity : Arity::One;
      if (arity == Arity::None) {
        if (f.has_value) throw UsageError("--" + f.name + " takes no value");
        o->set(c, "");
      } else if (arity == Arity::Many) {
        i = take_many(*o, f, args, i, c);
      } else {
        if (!f.has_value) {
          if (i + 1 < args.size()) f.value = args[++i];
          else if (o) throw UsageError("--" + f.name + " needs a value (" + o->arg + ")");
        }
        if (o) o->set(c, f.value);
        else unknown(c, f.name, f.value);
      }
    }
    return true;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& o : options_) out.push_back(o.name);
    return out;
  }
  // The names of the options tagged for `program`, in the table's order.
  std::vector<std::string> names(Program program) const {
    std::vector<std::string> out;
    for (const auto& o : options_)
      if (o.for_program(program)) out.push_back(o.name);
    return out;
  }

  // One help_line per option, in the table's order, its default at the end of its help.
  std::string help(std::size_t column) const {
    std::string s;
    Config defaults{};
    for (const auto& o : options_) s += help_of(o, defaults, column);
    return s;
  }
  // The same under headings: each group's options in its order. Throws std::logic_error for a
  // name not in the table, or an option in no group or in two (a test runs every table's).
  std::string help(std::size_t column, const std::vector<HelpGroup>& groups) const {
    std::string s;
    Config defaults{};
    std::vector<std::string> seen;
    for (const auto& g : groups) {
      s += (s.empty() ? "" : "\n") + g.heading + ":\n";
      for (const auto& n : g.names) {
        const Option<Config>* o = find(n);
        if (!o) throw std::logic_error("--help group " + g.heading + ": no option --" + n);
        for (const auto& m : seen)
          if (m == n) throw std::logic_error("--help: --" + n + " in two groups");
        seen.push_back(n);
        s += help_of(*o, defaults, column);
      }
    }
    if (seen.size() != options_.size())
      for (const auto& o : options_)
        if (std::find(seen.begin(), seen.end(), o.name) == seen.end())
          throw std::logic_error("--help: --" + o.name + " is in no group");
    return s;
  }
  // The same for the options tagged for `program` only (another program's --help): a group with
  // none of them is left out.
  std::string help(std::size_t column, const std::vector<HelpGroup>& groups,
                   Program program) const {
    std::string s;
    Config defaults{};
    for (const auto& g : groups) {
      std::string lines;
      for (const auto& n : g.names) {
        const Option<Config>* o = find(n);
        if (o && o->for_program(program)) lines += help_of(*o, defaults, column);
      }
      if (!lines.empty()) s += (s.empty() ? "" : "\n") + g.heading + ":\n" + lines;
    }
    return s;
  }

 private:
  // Arity::Many: the value after '=' and the arguments up to the next flag. Returns the index of
  // the last argument taken.
  std::size_t take_many(const Option<Config>& o, const Flag& f,
                        const std::vector<std::string>& args, std::size_t i, Config& c) const {
    bool any = f.has_value;
    if (f.has_value) o.set(c, f.value);
    for (; i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0; any = true) o.set(c, args[++i]);
    if (!any) throw UsageError("--" + o.name + " needs one or more values (" + o.arg + ")");
    return i;
  }

  static std::string help_of(const Option<Config>& o, Config& defaults, std::size_t column) {
    const std::string d = o.default_text(defaults);
    return help_line("--" + o.name + (o.arg.empty() ? "" : " " + o.arg),
                     o.help + (d.empty() ? "" : " (default: " + d + ")"), column);
  }

  std::vector<Option<Config>> options_;
};

}  // namespace gossiptrain::apps
