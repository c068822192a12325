// load_yaml: yaml-cpp's nodes with libyaml's scalars. The expected values are PyYAML 6's
// (yaml.safe_load) for the same texts; Debian 12's yaml-cpp alone reads the first four as ""
// (a quoted scalar of nothing but line breaks and spaces).
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/yaml_load.h"

namespace lmt {
namespace {

TEST(YamlLoad, QuotedScalarsOverEmptyLinesReadAsPyYamlReadsThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"a: '\n\n  '\n", "\n"},      // what yaml.safe_dump writes for "\n"
      {"a: \"\n\n  \"\n", "\n"},    // double-quoted
      {"a: ' \n\n  '\n", "\n"},     // a space before the break
      {"a: '\n\n\n  '\n", "\n\n"},  // two empty lines
      {"a: '\n\n  x'\n", "\nx"},    // text after them
      {"a: 'x\n\n\n  y'\n", "x\n\ny"}, {"a: \"\n\n  \\t\"\n", "\n\t"},  // an escape after them
      {"a: 'x\n\n  y'\n", "x\ny"},  // which yaml-cpp reads right
      {"a: 'x\n  y'\n", "x y"},        {"a: plain\n", "plain"},
  };
  for (const auto& [text, want] : cases)
    EXPECT_EQ(load_yaml(text, "t.yaml")["a"].Scalar(), want) << text;
}

TEST(YamlLoad, KeysListsAndAliasesAreRepairedAndMarksAndTagsKept) {
  const YAML::Node n = load_yaml(
      "until:\n  - '\n\n    '\n  - 'Q:'\n? '\n\n  '\n: 1\n"
      "x: &s '\n\n  '\ny: *s\nz: 7\n",
      "t.yaml");
  ASSERT_TRUE(n.IsMap());
  EXPECT_EQ(n["until"][0].Scalar(), "\n");
  EXPECT_EQ(n["until"][0].Tag(), "!");  // still a quoted scalar (a string, never a number)
  EXPECT_EQ(n["until"][0].Mark().line, 1);
  EXPECT_EQ(n["until"][1].Scalar(), "Q:");
  EXPECT_EQ(n["\n"].Scalar(), "1");
  EXPECT_EQ(n["x"].Scalar(), "\n");
  EXPECT_EQ(n["y"].Scalar(), "\n");
  EXPECT_EQ(n["z"].Tag(), "?");  // a plain scalar stays plain
}

TEST(YamlLoad, SyntaxErrorsAreYamlCppsAndOnlyTheFirstDocumentIsRead) {
  EXPECT_THROW(load_yaml("a: [1, 2\n", "t.yaml"), YAML::Exception);
  EXPECT_EQ(load_yaml("a: '\n\n  '\n---\na: 2\n", "t.yaml")["a"].Scalar(), "\n");
  EXPECT_TRUE(load_yaml("", "t.yaml").IsNull());
}

// Nested aliases, each level 9 times the one before: 600 bytes for 9^9 nodes. Refused at once,
// naming the source, before any walk over the tree.
TEST(YamlLoad, AliasesThatExpandPastTheBoundAreOneMessage) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) text += (k ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  try {
    load_yaml(text, "bomb.yaml");
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bomb.yaml: more than 100000 YAML nodes"),
              std::string::npos)
        << e.what();
  }
  // An alias inside the node it names is a cycle yaml-cpp builds: refused by depth.
  try {
    load_yaml("a: &a [1, *a]\n", "cycle.yaml");
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle.yaml: YAML nested deeper than 256 levels"),
              std::string::npos)
        << e.what();
  }
  // Four levels (9^4 = 6561 nodes and their lists) are fine.
  EXPECT_NO_THROW(load_yaml(text.substr(0, text.find("a4:")), "small.yaml"));
}

}  // namespace
}  // namespace lmt
