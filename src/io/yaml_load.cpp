#include "io/yaml_load.h"

#include <yaml.h>

#include <cstdint>
#include <memory>
#include <unordered_set>

#include "core/error.h"

namespace lmt {

namespace {

// Sets the scalars of `n` (a yaml-cpp node) to those of `y` (the libyaml node at the same place),
// walking both trees in document order; a subtree whose shape differs is left alone. `seen` stops
// at a node an alias has already brought (both parsers share it).
void take_scalars(YAML::Node n, yaml_document_t* doc, yaml_node_t* y,
                  std::unordered_set<const yaml_node_t*>& seen) {
  if (y == nullptr || !seen.insert(y).second) return;
  switch (y->type) {
    case YAML_SCALAR_NODE:
      if (n.IsScalar()) {
        const std::string v(reinterpret_cast<const char*>(y->data.scalar.value),
                            y->data.scalar.length);
        if (v != n.Scalar()) n = v;  // keeps the node's mark and tag
      }
      return;
    case YAML_SEQUENCE_NODE: {
      const auto count = y->data.sequence.items.top - y->data.sequence.items.start;
      if (!n.IsSequence() || static_cast<size_t>(count) != n.size()) return;
      size_t i = 0;
      for (yaml_node_item_t* it = y->data.sequence.items.start; it < y->data.sequence.items.top;
           ++it, ++i)
        take_scalars(n[i], doc, yaml_document_get_node(doc, *it), seen);
      return;
    }
    case YAML_MAPPING_NODE: {
      const auto count = y->data.mapping.pairs.top - y->data.mapping.pairs.start;
      if (!n.IsMap() || static_cast<size_t>(count) != n.size()) return;
      yaml_node_pair_t* p = y->data.mapping.pairs.start;
      for (auto it = n.begin(); it != n.end(); ++it, ++p) {
        take_scalars(it->first, doc, yaml_document_get_node(doc, p->key), seen);
        take_scalars(it->second, doc, yaml_document_get_node(doc, p->value), seen);
      }
      return;
    }
    default:
      return;
  }
}

// Counts the nodes of `n`, aliases expanded, into `count`; stops past kMaxYamlNodes nodes or
// kMaxYamlDepth levels (an alias inside the node it names, `a: &a [*a]`, is a cycle: endless).
void count_nodes(const YAML::Node& n, int64_t& count, int depth, bool& too_deep) {
  if (++count > kMaxYamlNodes || too_deep) return;
  if (depth > kMaxYamlDepth) {
    too_deep = true;
    return;
  }
  if (n.IsSequence()) {
    for (const YAML::Node& e : n) {
      count_nodes(e, count, depth + 1, too_deep);
      if (count > kMaxYamlNodes || too_deep) return;
    }
  } else if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end() && count <= kMaxYamlNodes && !too_deep; ++it) {
      count_nodes(it->first, count, depth + 1, too_deep);
      count_nodes(it->second, count, depth + 1, too_deep);
    }
  }
}

}  // namespace

YAML::Node load_yaml(const std::string& text, const std::string& label) {
  YAML::Node root = YAML::Load(text);
  int64_t count = 0;
  bool too_deep = false;
  count_nodes(root, count, 0, too_deep);
  if (too_deep)
    throw UserError(label + ": YAML nested deeper than " + std::to_string(kMaxYamlDepth) +
                    " levels once its aliases are expanded (or an alias inside the node it names)");
  if (count > kMaxYamlNodes)
    throw UserError(label + ": more than " + std::to_string(kMaxYamlNodes) +
                    " YAML nodes once its aliases are expanded (nested aliases repeat a node "
                    "each time they name it)");
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) return root;
  std::unique_ptr<yaml_parser_t, void (*)(yaml_parser_t*)> p(&parser, yaml_parser_delete);
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  yaml_document_t doc;
  if (yaml_parser_load(&parser, &doc) == 0) return root;
  std::unique_ptr<yaml_document_t, void (*)(yaml_document_t*)> d(&doc, yaml_document_delete);
  std::unordered_set<const yaml_node_t*> seen;
  take_scalars(root, &doc, yaml_document_get_root_node(&doc), seen);
  return root;
}

}  // namespace lmt
