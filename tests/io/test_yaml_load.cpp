// load_yaml: yaml-cpp's nodes with libyaml's scalars. The expected values are PyYAML 6's
// (yaml.safe_load) for the same texts; Debian 12's yaml-cpp alone reads the first four as ""
// (a quoted scalar of nothing but line breaks and spaces).
#include <gtest/gtest.h>

#include "io/yaml_load.h"

namespace lmt {
namespace {

TEST(YamlLoad, QuotedScalarsOverEmptyLinesReadAsPyYamlReadsThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"a: '\n\n  '\n", "\n"},         // what yaml.safe_dump writes for "\n"
      {"a: \"\n\n  \"\n", "\n"},       // double-quoted
      {"a: ' \n\n  '\n", "\n"},        // a space before the break
      {"a: '\n\n\n  '\n", "\n\n"},     // two empty lines
      {"a: '\n\n  x'\n", "\nx"},       // text after them
      {"a: 'x\n\n\n  y'\n", "x\n\ny"},
      {"a: \"\n\n  \\t\"\n", "\n\t"},  // an escape after them
      {"a: 'x\n\n  y'\n", "x\ny"},     // which yaml-cpp reads right
      {"a: 'x\n  y'\n", "x y"},
      {"a: plain\n", "plain"},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(load_yaml(text)["a"].Scalar(), want) << text;
}

TEST(YamlLoad, KeysListsAndAliasesAreRepairedAndMarksAndTagsKept) {
  const YAML::Node n = load_yaml("until:\n  - '\n\n    '\n  - 'Q:'\n? '\n\n  '\n: 1\n"
                                 "x: &s '\n\n  '\ny: *s\nz: 7\n");
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
  EXPECT_THROW(load_yaml("a: [1, 2\n"), YAML::Exception);
  EXPECT_EQ(load_yaml("a: '\n\n  '\n---\na: 2\n")["a"].Scalar(), "\n");
  EXPECT_TRUE(load_yaml("").IsNull());
}

}  // namespace
}  // namespace lmt
