// Every YAML text lmtrain reads (configs, their bases, --set values, eval task files) goes through
// load_yaml. yaml-cpp builds the nodes (their marks name lines in messages, and the config layer
// speaks its API); libyaml, the reference parser PyYAML is built on, then gives each scalar its
// value. Debian 12's yaml-cpp 0.7 reads a quoted scalar of nothing but line breaks and spaces as
// "": '<break><break>  ' (what PyYAML writes for "\n") should read "\n".
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>

namespace lmt {

// More nodes than this in one text, its aliases expanded (a node an alias repeats counts each
// time), is refused: a few hundred bytes of nested aliases can stand for billions of nodes, which
// every walk over the tree would visit.
constexpr int64_t kMaxYamlNodes = 100000;
// Deeper than this, aliases expanded, is refused too: an alias inside the node it names is a
// cycle, which yaml-cpp builds, and every walk over it would recurse without end.
constexpr int kMaxYamlDepth = 256;

// The first document of `text`, as YAML::Load reads it (and throwing its YAML::Exception on a
// syntax error), with every scalar's value, keys included, as libyaml reads it. Where libyaml
// rejects the text or builds another shape of tree, the yaml-cpp value stands. A tree of more
// than kMaxYamlNodes nodes or kMaxYamlDepth levels is a UserError naming `label` (the file or
// flag).
YAML::Node load_yaml(const std::string& text, const std::string& label);

}  // namespace lmt
