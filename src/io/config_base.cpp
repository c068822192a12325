// base_config: reading a config's chain of base files and merging their trees. The merge builds
// new maps where two files give the same section and shares every other node with the file it
// came from (ConfigFile::root), so that config_detail::file_of can name a key's file afterwards.
#include "io/config_base.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/regular_file.h"
#include "io/yaml_load.h"

namespace lmt {

namespace fs = std::filesystem;

YAML::Node load_yaml_file(const std::string& path, const std::string& label,
                          const std::string& what) {
  const std::string at = label == path ? "" : label + ": ";  // a base: the chain that named it
  std::error_code ec;
  if (!fs::exists(path, ec)) throw UserError(at + what + " '" + path + "' not found");
  if (fs::is_directory(path, ec)) throw UserError(at + what + " '" + path + "' is a directory");
  std::string text;
  try {
    text = read_regular_file(path, what, kMaxYamlConfigBytes);
  } catch (const UserError& e) {
    throw UserError(at + e.what());
  }
  try {
    return load_yaml(text, label);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) throw UserError(label + ": YAML syntax error: " + yaml_error_text(e));
    throw UserError(fmt::format("{}:{}:{}: YAML syntax error: {}", label, e.mark.line + 1,
                                e.mark.column + 1, yaml_error_text(e)));
  }
}

namespace {

constexpr const char* kBaseKey = "base_config";
// Bases read for one config, repeats (two bases sharing one) included: a bound on a diamond of
// bases that would read the same files exponentially often.
constexpr int kMaxBaseFiles = 256;

std::string line_of(const YAML::Node& n) {
  return n.Mark().is_null() ? "" : ":" + std::to_string(n.Mark().line + 1);
}

// `over` laid on `base`: two maps merge key by key; anything else (a list, a scalar) replaces, but
// an empty value keeps a base's map (a section written with nothing in it adds nothing).
YAML::Node merge(const YAML::Node& base, const YAML::Node& over) {
  if (base.IsMap() && over.IsNull()) return base;
  if (!base.IsMap() || !over.IsMap()) return over;
  YAML::Node out(YAML::NodeType::Map);
  for (auto it = base.begin(); it != base.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar() || !over[key.Scalar()]) out.force_insert(key, it->second);
  }
  for (auto it = over.begin(); it != over.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node under = key.IsScalar() ? base[key.Scalar()] : YAML::Node();
    // The key node is over's: a message about the key names the file that gave it last.
    out.force_insert(key, under ? merge(under, it->second) : it->second);
  }
  return out;
}

// A key written twice in one map of a base, anywhere: the merge could drop both copies in favour
// of a later file's, and the mistake would pass unseen.
void check_no_repeated_keys(const YAML::Node& n, const std::string& label,
                            const std::string& path) {
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_no_repeated_keys(n[i], label, path + "[" + std::to_string(i) + "]");
    return;
  }
  if (!n.IsMap()) return;
  std::map<std::string, int> first_line;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) continue;  // reported by the reader, naming the key's file
    const std::string full = path.empty() ? key.Scalar() : path + "." + key.Scalar();
    auto [pos, fresh] = first_line.emplace(key.Scalar(), key.Mark().line + 1);
    if (!fresh)
      throw UserError(label + line_of(key) + ": key '" + excerpt(full) +
                      "' appears twice (first on line " + std::to_string(pos->second) + ")");
    check_no_repeated_keys(it->second, label, full);
  }
}

class BaseReader {
 public:
  std::vector<ConfigFile> bases;

  // The file at `path` (reached through `chain`, `path` last) with its bases applied.
  YAML::Node resolve(const std::string& path, const std::vector<std::string>& chain,
                     const std::vector<fs::path>& seen) {
    const bool top = chain.size() == 1;
    const std::string label = fmt::format("{}", fmt::join(chain, " -> "));
    const YAML::Node root = top ? load_yaml_file(path, path, "config file")
                                : load_yaml_file(path, label, "base_config file");
    if (!top && !root.IsNull() && !root.IsMap())
      throw UserError(label + line_of(root) + ": a base config must be a map of sections, got " +
                      config_detail::describe(root));
    if (!top) check_no_repeated_keys(root, label, "");
    const std::vector<std::string> names = base_names(root, label);
    YAML::Node merged;
    for (const std::string& name : names) {
      const std::string base = (fs::path(path).parent_path() / name).string();
      std::vector<std::string> next_chain = chain;
      next_chain.push_back(base);
      const std::string next_label = fmt::format("{}", fmt::join(next_chain, " -> "));
      std::error_code ec;
      const fs::path id = fs::weakly_canonical(base, ec);
      for (const fs::path& s : seen)
        if (!ec && s == id) throw UserError(next_label + ": base_config cycle");
      if (++files_read_ > kMaxBaseFiles)
        throw UserError(fmt::format(
            "{}: more than {} base_config files read for one config (bases that share bases are "
            "read once for each path to them)",
            next_label, kMaxBaseFiles));
      std::vector<fs::path> next_seen = seen;
      next_seen.push_back(id);
      const YAML::Node b = resolve(base, next_chain, next_seen);
      // reset, not =: assigning to a Node that holds a tree makes that tree's node share the new
      // value (yaml-cpp's set_ref), so the first base's root would become the merge and every
      // key after it would be reported in the first base's file.
      merged.reset(merged ? merge(merged, b) : b);
    }
    if (!top) bases.push_back(ConfigFile{label, root});
    if (names.empty() && !root.IsMap()) return root;
    const YAML::Node own = without_base_key(root);
    return merged ? merge(merged, own) : own;
  }

 private:
  int files_read_ = 0;

  // The files `root`'s base_config names, in order; [] when it has none.
  static std::vector<std::string> base_names(const YAML::Node& root, const std::string& label) {
    if (!root.IsMap()) return {};
    std::vector<std::string> names;
    int count = 0;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar() || key.Scalar() != kBaseKey) continue;
      if (++count > 1) throw UserError(label + line_of(key) + ": key 'base_config' appears twice");
      const YAML::Node v = it->second;
      auto bad = [&](const YAML::Node& at) {
        return UserError(label + line_of(at) +
                         ": key 'base_config': expected a file name or a list of file names, got " +
                         config_detail::describe(at.is(key) ? v : at));
      };
      if (v.IsScalar()) {
        names.push_back(v.Scalar());
      } else if (v.IsSequence()) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].IsScalar()) throw bad(v[i]);
          names.push_back(v[i].Scalar());
        }
      } else {
        throw bad(key);  // at the key's line: an empty value's own mark is the next line's
      }
      for (const std::string& n : names)
        if (n.empty())
          throw UserError(label + line_of(key) + ": key 'base_config': empty file name");
    }
    return names;
  }

  // `root` less its base_config key (the other key nodes shared, so they keep their file).
  static YAML::Node without_base_key(const YAML::Node& root) {
    if (!root.IsMap() || !root[kBaseKey]) return root;
    YAML::Node out(YAML::NodeType::Map);
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key = it->first;
      if (!key.IsScalar() || key.Scalar() != kBaseKey) out.force_insert(key, it->second);
    }
    return out;
  }
};

}  // namespace

ConfigTree load_config_tree(const std::string& path) {
  BaseReader reader;
  std::error_code ec;
  YAML::Node root = reader.resolve(path, {path}, {fs::weakly_canonical(path, ec)});
  return ConfigTree{root, std::move(reader.bases)};
}

}  // namespace lmt
