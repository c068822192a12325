// Config structs <-> YAML, driven by each struct's visit() list (name, field, help and, for a
// string of a few values, its choices: core/config_checks.h), so a field is declared once and
// reading, saving, --set overrides and the key listing follow. Field types:
// std::string, int64_t, double, bool, any struct with visit(), and std::vector of any of those.
// Reading is strict: unknown keys, wrong types and strings where numbers belong are UserErrors that
// name the file, line and dotted key (data.sources[1].path), or the --set argument responsible.
#pragma once

#include <yaml-cpp/yaml.h>

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/config_checks.h"

namespace lmt {

// One applied --set argument: the normalised key path ("data.sources[0].path") and the argument.
struct ConfigOverride {
  std::string path;
  std::string arg;
};

// A base_config file of a config (io/config_base.h).
struct ConfigFile {
  std::string name;  // how messages name it: the chain of files that reached it, "a.yaml -> b.yaml"
  YAML::Node root;   // the file's own tree: a node of the merged tree found in it came from it
};

// Where the YAML being read came from, for messages.
struct ConfigSource {
  std::string file;                       // the config file's name
  std::vector<ConfigOverride> overrides;  // --set arguments applied to the tree
  std::vector<ConfigFile> bases;          // its base_config files (a node in none: from `file`)
};

// One key of a config, for `--help-config`.
struct ConfigKey {
  std::string path;   // "train.lr", "data.sources[].path"
  std::string type;   // "integer", "number", "bool", "string", "list", "section"
  std::string value;  // the default, as YAML
  std::string help;
  std::vector<std::string> choices;  // the values it takes, when visit() declares them
};

// Applies "section.key=value" to `root`, creating sections on the way. The value is read as YAML
// (a scalar, or a flow list/map such as [{path: a.txt}]); unquoted text that YAML would not read
// back as itself (a: b, #x, ---, a # b) is taken as that text, a string. A list element is
// addressed by its index (data.sources.0.path); the index one past the end appends. Throws
// UserError naming the argument when it is malformed.
ConfigOverride apply_override(YAML::Node& root, const std::string& arg);
std::vector<ConfigOverride> apply_overrides(YAML::Node& root, const std::vector<std::string>& args);

// A YAML exception's message for a user (yaml-cpp calls its nesting limit "bad file").
std::string yaml_error_text(const YAML::Exception& e);

// Throws, naming the file and line, unless `root` is a map of sections or empty. Checked before
// --set is applied too, so that a file of the wrong shape is not blamed on an --set argument.
void check_config_root(const YAML::Node& root, const ConfigSource& src);

// An aligned table of keys, types, defaults and help text (and the choices after it).
std::string format_config_keys(const std::vector<ConfigKey>& keys);

namespace config_detail {

struct NullVisitor {
  template <class T>
  void operator()(const char*, T&, const char*, Choices = {}) {}
};
template <class T>
concept Visitable = requires(T& t, NullVisitor& v) {
  t.visit(v);
};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {
  using Element = T;
};

std::string join(const std::string& path, const std::string& key);
std::string index_path(const std::string& path, size_t i);
[[noreturn]] void fail(const ConfigSource& src, const YAML::Node& at, const std::string& path,
                       const std::string& msg);
// The name of the file `at` came from: the base (as its chain) whose tree holds it, else src.file.
std::string file_of(const ConfigSource& src, const YAML::Node& at);
std::string describe(const YAML::Node& node);
// Throws for unknown or duplicate keys in a map; `known` are the keys visit() declared.
void check_keys(const YAML::Node& map, const std::vector<std::string>& known,
                const std::string& path, const ConfigSource& src);

void read_scalar(const YAML::Node& n, std::string& out, const std::string& path,
                 const ConfigSource& src);
void read_scalar(const YAML::Node& n, int64_t& out, const std::string& path,
                 const ConfigSource& src);
void read_scalar(const YAML::Node& n, double& out, const std::string& path,
                 const ConfigSource& src);
void read_scalar(const YAML::Node& n, bool& out, const std::string& path, const ConfigSource& src);

void emit_scalar(YAML::Emitter& out, const std::string& v);
void emit_scalar(YAML::Emitter& out, int64_t v);
void emit_scalar(YAML::Emitter& out, double v);
void emit_scalar(YAML::Emitter& out, bool v);
std::string scalar_type(const std::string&);
std::string scalar_type(int64_t);
std::string scalar_type(double);
std::string scalar_type(bool);

template <class T>
void read_value(const YAML::Node& node, T& out, const std::string& path, const ConfigSource& src);

class MapReader {
 public:
  MapReader(const YAML::Node& map, const std::string& path, const ConfigSource& src)
      : map_(map), path_(path), src_(src) {}
  template <class T>
  void operator()(const char* key, T& field, const char*, Choices = {}) {
    known_.emplace_back(key);
    const YAML::Node& map = map_;  // const: a missing key must not be inserted
    if (YAML::Node child = map[key]) read_value(child, field, join(path_, key), src_);
  }
  const std::vector<std::string>& known() const { return known_; }

 private:
  const YAML::Node& map_;
  const std::string& path_;
  const ConfigSource& src_;
  std::vector<std::string> known_;
};

template <class T>
void read_value(const YAML::Node& node, T& out, const std::string& path, const ConfigSource& src) {
  if constexpr (Visitable<T>) {
    if (node.IsNull()) return;  // an empty section keeps its defaults
    if (!node.IsMap())
      fail(src, node, path, "'" + path + "' must be a map of keys, got " + describe(node));
    MapReader reader(node, path, src);
    out.visit(reader);
    check_keys(node, reader.known(), path, src);
  } else if constexpr (IsVector<T>::value) {
    out.clear();
    if (node.IsNull()) return;
    if (!node.IsSequence())
      fail(src, node, path, "key '" + path + "': expected a list, got " + describe(node));
    out.resize(node.size());
    for (size_t i = 0; i < node.size(); ++i) read_value(node[i], out[i], index_path(path, i), src);
  } else {
    read_scalar(node, out, path, src);
  }
}

template <class T>
void emit_value(YAML::Emitter& out, T& v);

// A section that declares `static constexpr bool kOmitWhenDefault = true` is left out of the YAML
// while every key of it holds its default: a run that does not use it writes, and so hashes, its
// config as before the section existed (tests/data/saved_runs).
template <class T>
concept OmitWhenDefault = requires { T::kOmitWhenDefault; };

template <class T>
std::string emitted(T& v) {
  YAML::Emitter out;
  emit_value(out, v);
  return out.c_str();
}

// Whether `field` is such a section holding its defaults: left out of every written form of the
// config (the YAML, the JSON W&B records).
template <class T>
bool omitted(T& field) {
  if constexpr (OmitWhenDefault<T>) {
    T defaults{};
    return emitted(field) == emitted(defaults);
  }
  return false;
}

struct EmitVisitor {
  YAML::Emitter& out;
  template <class T>
  void operator()(const char* key, T& field, const char*, Choices = {}) {
    if (omitted(field)) return;
    out << YAML::Key << key << YAML::Value;
    emit_value(out, field);
  }
};

template <class T>
void emit_value(YAML::Emitter& out, T& v) {
  if constexpr (Visitable<T>) {
    out << YAML::BeginMap;
    EmitVisitor ev{out};
    v.visit(ev);
    out << YAML::EndMap;
  } else if constexpr (IsVector<T>::value) {
    if (v.empty()) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (auto& e : v) emit_value(out, e);
    out << YAML::EndSeq;
  } else {
    emit_scalar(out, v);
  }
}

struct KeyLister {
  std::string prefix;
  std::vector<ConfigKey>& keys;
  template <class T>
  void operator()(const char* key, T& field, const char* help, Choices choices = {}) {
    const std::string path = join(prefix, key);
    if constexpr (Visitable<T>) {
      keys.push_back({path, "section", "", help, {}});
      KeyLister sub{path, keys};
      field.visit(sub);
    } else if constexpr (IsVector<T>::value) {
      using E = typename IsVector<T>::Element;
      keys.push_back({path, "list", "[]", help, {}});
      if constexpr (Visitable<E>) {
        E element{};
        KeyLister sub{path + "[]", keys};
        element.visit(sub);
      }
    } else {
      YAML::Emitter out;
      emit_scalar(out, field);
      keys.push_back({path, scalar_type(field), out.c_str(), help, {}});
      for (const char* c : choices) keys.back().choices.emplace_back(c);
    }
  }
};

}  // namespace config_detail

// Fills `cfg` from `root` (a map of sections; null keeps every default). Keys absent from the
// YAML keep the struct's defaults.
template <class T>
void read_config(const YAML::Node& root, T& cfg, const ConfigSource& src) {
  check_config_root(root, src);
  config_detail::read_value(root, cfg, "", src);
}

// Every field, defaults included, in visit() order, as block YAML text ending in a newline.
template <class T>
std::string config_to_yaml(T& cfg) {
  YAML::Emitter out;
  config_detail::emit_value(out, cfg);
  return std::string(out.c_str()) + "\n";
}

// Every key of T with its type, default (the values in `cfg`) and help text.
template <class T>
std::vector<ConfigKey> config_keys(T& cfg) {
  std::vector<ConfigKey> keys;
  config_detail::KeyLister lister{"", keys};
  cfg.visit(lister);
  return keys;
}

}  // namespace lmt
