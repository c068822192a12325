// Configs that build on configs: a top-level `base_config:` names one YAML file or a list of them,
// relative to the file that names them. Bases apply in the order named (later over earlier), the
// file's own keys over its bases, and a base may name bases of its own. Mappings merge key by key;
// a list or a scalar replaces what a base had. The merged tree keeps each file's own nodes, so that
// a message about a key can name the file (and line) the key came from (ConfigSource::bases).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "io/config_yaml.h"

namespace lmt {

// A config file with its bases applied.
struct ConfigTree {
  YAML::Node root;                // the merged tree, without base_config keys
  std::vector<ConfigFile> bases;  // every base file, in the order applied (empty: none)
};

// Reads `path` (a config file, as the top-level `--config`) and every base it names. A missing or
// unreadable base, one that is not a regular file, a YAML syntax error, a base that is not a map of
// sections, a malformed base_config value, a key written twice in a base, and a cycle are each one
// UserError naming the chain of files ("a.yaml -> b.yaml -> a.yaml: base_config cycle").
ConfigTree load_config_tree(const std::string& path);

// The YAML tree of one config file (a regular file of at most kMaxYamlConfigBytes). `label` names
// the file in messages: the path itself, or for a base the chain that reached it (then every
// message starts with it); `what` is the kind of file ("config file").
YAML::Node load_yaml_file(const std::string& path, const std::string& label,
                          const std::string& what);

}  // namespace lmt
