// The generic visit()-driven YAML layer on a small struct of its own: lists of strings, lists of
// structs inside lists, emitting, the key listing (with a key's choices) and the override tree
// edits.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/config_yaml.h"
#include "io/io_test_util.h"

namespace lmt {
namespace {

using test::expect_user_error;

struct Leaf {
  std::string name = "leaf";
  std::vector<std::string> tags;
  template <class V>
  void visit(V& v) {
    v("name", name, "the leaf's name");
    v("tags", tags, "free-form labels");
  }
};

struct Tree {
  int64_t depth = 3;
  double ratio = 0.5;
  bool enabled = false;
  std::vector<Leaf> leaves;
  Leaf main;
  template <class V>
  void visit(V& v) {
    v("depth", depth, "levels");
    v("ratio", ratio, "a share");
    v("enabled", enabled, "switch");
    v("leaves", leaves, "all leaves");
    v("main", main, "the main leaf");
  }
};

Tree read(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  YAML::Node root = YAML::Load(yaml);
  ConfigSource src{"tree.yaml", apply_overrides(root, sets)};
  Tree t;
  read_config(root, t, src);
  return t;
}

TEST(ConfigYaml, ReadsNestedListsAndStrings) {
  Tree t = read(
      "depth: -4\nratio: .inf\nleaves:\n  - {name: a, tags: [x, y]}\n  - tags: []\nmain:\n  tags: "
      "[z]\n");
  EXPECT_EQ(t.depth, -4);
  EXPECT_TRUE(std::isinf(t.ratio));
  ASSERT_EQ(t.leaves.size(), 2u);
  EXPECT_EQ(t.leaves[0].tags, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(t.leaves[1].name, "leaf");
  EXPECT_EQ(t.main.tags, (std::vector<std::string>{"z"}));
  Tree empty = read("");
  EXPECT_EQ(empty.depth, 3);
}

TEST(ConfigYaml, ErrorsInsideLists) {
  expect_user_error([] { read("leaves:\n  - name: a\n  - tags: [x, [y]]\n"); },
                    {"tree.yaml:3:", "key 'leaves[1].tags[1]': expected a string, got a list"});
  expect_user_error(
      [] { read("leaves:\n  - nmae: a\n"); },
      {"tree.yaml:2:", "unknown key 'leaves[0].nmae'", "did you mean 'leaves[0].name'?"});
  expect_user_error([] { read("main: [1]\n"); },
                    {"tree.yaml:1:", "'main' must be a map of keys, got a list"});
  expect_user_error([] { read("? [a]\n: 1\n"); }, {"is a list, not a name"});
  expect_user_error([] { read("ratio: '0.5'\n"); },
                    {"key 'ratio': expected a number, got the string '0.5'"});
  expect_user_error([] { read("ratio: 1e999\n"); }, {"out of the range of a double"});
  expect_user_error([] { read("depth: 0x10\n"); },
                    {"key 'depth': expected an integer, got '0x10'"});
  expect_user_error([] { read("enabled: \"true\"\n"); },
                    {"expected true or false, got the string 'true'"});
  expect_user_error([] { read("leaves: []", {"leaves.1.name=x"}); },
                    {"--set 'leaves.1.name=x'", "'leaves' is a list of 0 elements"});
  expect_user_error([] { read("", {"leaves.1.name=x"}); },
                    {"--set 'leaves.1.name=x'", "'leaves' is a list of 0 elements"});
  expect_user_error([] { read("", {"depth.0=1"}); },
                    {"key 'depth': expected an integer, got a list", "(from --set 'depth.0=1')"});
}

TEST(ConfigYaml, OverridesEditTheTree) {
  Tree t = read("leaves: [{name: a}]\n",
                {"leaves.0.tags=[p, q]", "leaves.1.name=b", "main.tags.0=first", "depth=+7",
                 "ratio=-2.5e-3", "enabled=True", "main.name=#hash"});
  Tree u = read("", {"main.name=a # b", "leaves=[{name: ---}]", "main.tags=[---, '#']"});
  EXPECT_EQ(u.main.name, "a # b");
  Tree v = read("", {"leaves.0.tags.0=x", "leaves.0.tags.1=y"});  // lists made on the way
  ASSERT_EQ(v.leaves.size(), 1u);
  EXPECT_EQ(v.leaves[0].tags, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(u.main.tags, (std::vector<std::string>{"---", "#"}));
  EXPECT_EQ(t.leaves[0].tags, (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(t.leaves[1].name, "b");
  EXPECT_EQ(t.main.tags, (std::vector<std::string>{"first"}));
  EXPECT_EQ(t.depth, 7);
  EXPECT_EQ(t.ratio, -2.5e-3);
  EXPECT_TRUE(t.enabled);
  EXPECT_EQ(t.main.name, "#hash");  // YAML would read a comment: the text is meant
  expect_user_error([] { read("", {"main.name"}); }, {"--set 'main.name'"});
}

TEST(ConfigYaml, EmitsEveryFieldAndRoundTrips) {
  Tree t;
  t.leaves.push_back(Leaf{"yes", {"", "1.5", "a b"}});
  t.ratio = 1.0;
  const std::string yaml = config_to_yaml(t);
  EXPECT_NE(yaml.find("depth: 3\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("ratio: 1.0\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("enabled: false\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("tags: []"), std::string::npos) << yaml;
  Tree back = read(yaml);
  EXPECT_EQ(config_to_yaml(back), yaml);
  EXPECT_EQ(back.leaves[0].name, "yes");
  EXPECT_EQ(back.leaves[0].tags, t.leaves[0].tags);
}

TEST(ConfigYaml, ListsKeysWithHelp) {
  Tree t;
  const std::vector<ConfigKey> keys = config_keys(t);
  std::vector<std::string> paths;
  for (const ConfigKey& k : keys) paths.push_back(k.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"depth", "ratio", "enabled", "leaves", "leaves[].name",
                                             "leaves[].tags", "main", "main.name", "main.tags"}));
  EXPECT_EQ(keys[1].type, "number");
  EXPECT_EQ(keys[1].value, "0.5");
  EXPECT_EQ(keys[7].value, "leaf");
  const std::string table = format_config_keys(keys);
  EXPECT_NE(table.find("leaves[].name"), std::string::npos);
  EXPECT_NE(table.find("the leaf's name"), std::string::npos);
  EXPECT_NE(table.find("integer"), std::string::npos);
}

// A key declared with its choices: the listing shows them and require_choices checks them, from
// the one list in visit().
struct Outline {
  std::string kind = "round";
  template <class V>
  void visit(V& v) {
    v("kind", kind, "its outline", {"round", "square"});
  }
};

TEST(ConfigYaml, ChoicesDeclaredInVisitAreListedAndChecked) {
  Outline o;
  const std::vector<ConfigKey> keys = config_keys(o);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].choices, (std::vector<std::string>{"round", "square"}));
  EXPECT_EQ(format_config_keys(keys), "kind  string  round  its outline (one of: round, square)\n");
  require_choices(o, "outline.");
  o.kind = "oval";
  expect_user_error([&] { require_choices(o, "outline."); },
                    {"outline.kind must be one of round, square (got 'oval')"});
}

}  // namespace
}  // namespace lmt
