// The non-template half of config_yaml.h: strict scalar parsing, messages (file:line or the --set
// argument, plus a "did you mean" by edit distance), scalar emitting and --set application.
#include "io/config_yaml.h"

#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>

#include "core/error.h"
#include "io/yaml_load.h"

namespace lmt {
namespace config_detail {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string index_path(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

namespace {

// The --set argument that produced `path` (or a section above or below it), if any.
const ConfigOverride* origin(const ConfigSource& src, const std::string& path) {
  auto under = [](const std::string& a, const std::string& b) {  // a is b or inside b
    return a.size() >= b.size() && a.compare(0, b.size(), b) == 0 &&
           (a.size() == b.size() || a[b.size()] == '.' || a[b.size()] == '[');
  };
  for (auto it = src.overrides.rbegin(); it != src.overrides.rend(); ++it)
    if (under(path, it->path) || under(it->path, path)) return &*it;
  return nullptr;
}

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("trian").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string suggest(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(1, key.size() / 3) + 1;
  for (const std::string& k : known) {
    size_t d = edit_distance(key, k);
    if (d >= best_d && key.size() >= 4 && k.find(key) != std::string::npos) d = best_d - 1;
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

bool is_string_tag(const YAML::Node& n) {
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

[[noreturn]] void type_error(const ConfigSource& src, const YAML::Node& n, const std::string& path,
                             const std::string& expected) {
  fail(src, n, path, "key '" + path + "': expected " + expected + ", got " + describe(n));
}

// A YAML scalar that must be a number: plain (not quoted) and not a bool or null spelling.
const std::string& number_text(const YAML::Node& n, const std::string& path,
                               const ConfigSource& src, const std::string& expected) {
  if (!n.IsScalar() || is_string_tag(n)) type_error(src, n, path, expected);
  return n.Scalar();
}

}  // namespace

namespace {

bool holds(const YAML::Node& tree, const YAML::Node& at) {
  if (tree.is(at)) return true;
  if (tree.IsMap()) {
    for (auto it = tree.begin(); it != tree.end(); ++it)
      if (holds(it->first, at) || holds(it->second, at)) return true;
  } else if (tree.IsSequence()) {
    for (auto it = tree.begin(); it != tree.end(); ++it)
      if (holds(*it, at)) return true;
  }
  return false;
}

// A message located in the file only: what no --set can have caused (a key written twice).
[[noreturn]] void fail_in_file(const ConfigSource& src, const YAML::Node& at,
                               const std::string& msg) {
  const std::string file = file_of(src, at);
  const YAML::Mark mark = at.Mark();
  if (!mark.is_null()) throw UserError(file + ":" + std::to_string(mark.line + 1) + ": " + msg);
  throw UserError(file + ": " + msg);
}

}  // namespace

std::string file_of(const ConfigSource& src, const YAML::Node& at) {
  // Only on the way to a message: a walk of each base's tree (a few KiB of YAML) is cheap there.
  for (const ConfigFile& base : src.bases)
    if (at.IsDefined() && holds(base.root, at)) return base.name;
  return src.file;
}

void fail(const ConfigSource& src, const YAML::Node& at, const std::string& path,
          const std::string& msg) {
  if (const ConfigOverride* o = origin(src, path))
    throw UserError(src.file + ": " + msg + " (from --set '" + excerpt(o->arg) + "')");
  fail_in_file(src, at, msg);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing (null)";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar: {
      return (is_string_tag(node) ? "the string '" : "'") + excerpt(node.Scalar()) + "'";
    }
    default:
      return "an undefined node";
  }
}

void check_keys(const YAML::Node& map, const std::vector<std::string>& known,
                const std::string& path, const ConfigSource& src) {
  std::map<std::string, int> first_line;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: *it is a temporary
    if (!key.IsScalar())
      fail(src, key, path, "a key in '" + path + "' is " + describe(key) + ", not a name");
    const std::string name = key.Scalar();
    const std::string full = join(path, name);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string msg = "unknown key '" + excerpt(full) + "'";
      if (std::string s = name.size() <= 64 ? suggest(name, known) : ""; !s.empty())
        msg += "; did you mean '" + join(path, s) + "'?";
      fail(src, key, full, msg);
    }
    auto [pos, fresh] = first_line.emplace(name, key.Mark().line + 1);
    if (!fresh)  // in the file itself: --set replaces a key, it never adds a second one
      fail_in_file(
          src, key,
          "key '" + full + "' appears twice (first on line " + std::to_string(pos->second) + ")");
  }
}

void read_scalar(const YAML::Node& n, std::string& out, const std::string& path,
                 const ConfigSource& src) {
  if (n.IsNull())
    fail(src, n, path,
         "key '" + path + "': expected a string, got nothing (write \"\" for an empty string)");
  if (!n.IsScalar()) type_error(src, n, path, "a string");
  out = n.Scalar();
}

void read_scalar(const YAML::Node& n, int64_t& out, const std::string& path,
                 const ConfigSource& src) {
  const std::string& s = number_text(n, path, src, "an integer");
  const char* b = s.data() + (!s.empty() && s[0] == '+');
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec == std::errc::result_out_of_range)
    fail(src, n, path,
         "key '" + path + "': " + excerpt(s) + " is out of the range of a 64-bit integer");
  if (ec != std::errc() || p != e || b == e) type_error(src, n, path, "an integer");
}

void read_scalar(const YAML::Node& n, double& out, const std::string& path,
                 const ConfigSource& src) {
  const std::string& s = number_text(n, path, src, "a number");
  const bool neg = !s.empty() && s[0] == '-';
  const std::string body = s.substr(!s.empty() && (s[0] == '-' || s[0] == '+'));
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    out = neg ? -INFINITY : INFINITY;
    return;
  }
  if (body == ".nan" || body == ".NaN" || body == ".NAN") {
    out = NAN;
    return;
  }
  // from_chars also takes "inf" and "nan", which YAML reads as strings: demand a digit or '.'.
  const bool numeric_start =
      !body.empty() && (std::isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.');
  const char* b = s.data() + (!s.empty() && s[0] == '+');
  const char* e = s.data() + s.size();
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec == std::errc::result_out_of_range)
    fail(src, n, path, "key '" + path + "': " + excerpt(s) + " is out of the range of a double");
  if (!numeric_start || ec != std::errc() || p != e) type_error(src, n, path, "a number");
}

void read_scalar(const YAML::Node& n, bool& out, const std::string& path, const ConfigSource& src) {
  const std::string& s = number_text(n, path, src, "true or false");
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
  } else {
    type_error(src, n, path, "true or false");
  }
}

namespace {
// Strings another YAML reader would take for a number, bool or null are written quoted.
bool looks_typed(const std::string& s) {
  static const char* kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const char* w : kWords)
    if (lower == w) return true;
  double d;
  const char* b = s.data() + (!s.empty() && (s[0] == '+'));
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), d);
  return (ec == std::errc() || ec == std::errc::result_out_of_range) && p == s.data() + s.size();
}
}  // namespace

void emit_scalar(YAML::Emitter& out, const std::string& v) {
  if (v.empty() || looks_typed(v) || v.front() == ' ' || v.back() == ' ') out << YAML::DoubleQuoted;
  out << v;
}

void emit_scalar(YAML::Emitter& out, int64_t v) {
  out << std::to_string(v);
}

void emit_scalar(YAML::Emitter& out, double v) {
  if (std::isnan(v)) {
    out << ".nan";
  } else if (std::isinf(v)) {
    out << (v < 0 ? "-.inf" : ".inf");
  } else {
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips
    std::string s(buf, p);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    out << s;
  }
}

void emit_scalar(YAML::Emitter& out, bool v) {
  out << (v ? "true" : "false");
}

std::string scalar_type(const std::string&) {
  return "string";
}
std::string scalar_type(int64_t) {
  return "integer";
}
std::string scalar_type(double) {
  return "number";
}
std::string scalar_type(bool) {
  return "bool";
}

}  // namespace config_detail

std::string yaml_error_text(const YAML::Exception& e) {
  // yaml-cpp reports its recursion limit as a "bad file"; say what the limit is about.
  if (dynamic_cast<const YAML::DeepRecursion*>(&e))
    return "lists or maps nested too deeply (a config is a few levels deep)";
  return e.msg;
}

void check_config_root(const YAML::Node& root, const ConfigSource& src) {
  if (!root.IsNull() && !root.IsMap())
    config_detail::fail_in_file(
        src, root, "the config must be a map of sections, got " + config_detail::describe(root));
}

// ---- --set overrides ----

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

YAML::Node parse_override_value(const std::string& arg, const std::string& text) {
  auto bad = [&](const std::string& why) {
    return UserError("--set '" + excerpt(arg) + "': " + why);
  };
  if (text.empty()) return load_yaml("''", "--set");  // an empty string, not null
  if (text.front() == '[' || text.front() == '{') {
    try {
      return load_yaml(text, "--set '" + excerpt(arg) + "'");
    } catch (const YAML::Exception& e) {
      throw bad("the value is not valid YAML: " + yaml_error_text(e));
    }
  }
  const bool quoted = text.front() == '"' || text.front() == '\'';
  const bool null_word = text == "~" || text == "null" || text == "Null" || text == "NULL";
  try {
    YAML::Node n = load_yaml(text, "--set '" + excerpt(arg) + "'");
    if (n.IsScalar() && (quoted || n.Scalar() == text)) return n;
    if (n.IsNull() && null_word) return n;
  } catch (const YAML::Exception&) {
  }
  // "a: b", "- x", "---", "#x", "a # b": YAML would read a map, a list, nothing or a cut-off
  // comment; the user meant the text itself, as a string.
  YAML::Node s(text);
  s.SetTag("!");
  return s;
}

bool parse_index(const std::string& part, size_t& index) {
  auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
  return ec == std::errc() && p == part.data() + part.size();
}

}  // namespace

ConfigOverride apply_override(YAML::Node& root, const std::string& arg) {
  auto bad = [&](const std::string& why) {
    return UserError("--set '" + excerpt(arg) + "': " + why);
  };
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) throw bad("expected section.key=value");
  const std::string key = trim(arg.substr(0, eq));
  if (key.empty()) throw bad("the key before '=' is empty (expected section.key=value)");
  std::vector<std::string> parts;
  for (size_t b = 0;;) {
    const size_t dot = key.find('.', b);
    parts.push_back(key.substr(b, dot == std::string::npos ? std::string::npos : dot - b));
    if (parts.back().empty()) throw bad("empty part in key '" + key + "'");
    if (dot == std::string::npos) break;
    b = dot + 1;
  }
  const YAML::Node value = parse_override_value(arg, trim(arg.substr(eq + 1)));

  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw bad("the config is not a map of sections");
  YAML::Node cur = root;
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const std::string& part = parts[i];
    // A node made on the way is a list when the next part is an index (no config key is a number).
    size_t ignored = 0;
    const YAML::Node fresh(!last && parse_index(parts[i + 1], ignored) ? YAML::NodeType::Sequence
                                                                       : YAML::NodeType::Map);
    if (cur.IsSequence()) {
      size_t idx = 0;
      if (!parse_index(part, idx) || idx > cur.size())
        throw bad("'" + path + "' is a list of " + std::to_string(cur.size()) + " elements; '" +
                  part + "' is not an index from 0 to " + std::to_string(cur.size()));
      path = config_detail::index_path(path, idx);
      if (idx == cur.size())
        cur.push_back(last ? value : fresh);
      else if (last)
        cur[idx] = value;
      YAML::Node child = cur[idx];
      if (!last && child.IsNull()) cur[idx] = fresh;
      cur.reset(cur[idx]);
    } else {
      if (!cur.IsMap()) throw bad("'" + path + "' is a value, not a section");
      path = config_detail::join(path, part);
      if (last) {
        cur[part] = value;
      } else {
        YAML::Node child = cur[part];
        if (!child.IsDefined() || child.IsNull()) cur[part] = fresh;
      }
      cur.reset(cur[part]);
    }
  }
  return ConfigOverride{path, arg};
}

std::vector<ConfigOverride> apply_overrides(YAML::Node& root,
                                            const std::vector<std::string>& args) {
  std::vector<ConfigOverride> applied;
  for (const std::string& a : args) applied.push_back(apply_override(root, a));
  return applied;
}

std::string format_config_keys(const std::vector<ConfigKey>& keys) {
  size_t w_path = 0, w_type = 0, w_value = 0;
  for (const ConfigKey& k : keys) {
    w_path = std::max(w_path, k.path.size());
    w_type = std::max(w_type, k.type.size());
    w_value = std::max(w_value, std::min<size_t>(k.value.size(), 24));
  }
  std::string out;
  for (const ConfigKey& k : keys) {
    std::string line = k.path + std::string(w_path - k.path.size() + 2, ' ') + k.type +
                       std::string(w_type - k.type.size() + 2, ' ') + k.value;
    line += std::string(k.value.size() < w_value ? w_value - k.value.size() + 2 : 2, ' ');
    std::string choices;
    for (const std::string& c : k.choices) choices += (choices.empty() ? "" : ", ") + c;
    out += line + k.help + (choices.empty() ? "" : " (one of: " + choices + ")") + "\n";
  }
  return out;
}

}  // namespace lmt
