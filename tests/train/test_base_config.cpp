// base_config: configs built on configs. Chains with overrides at each level and --set over all,
// lists replacing and maps merging, several bases in order, paths relative to the naming file, and
// every failure (cycle, missing base, a base of the wrong shape, a bad key in a base) as one
// message naming the chain of files and, for a key, the base file and line it came from.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/io_test_util.h"
#include "train/run_config.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::expect_user_error;

const char* kModel = R"(model:
  vocab_size: 512
  hidden_size: 64
  intermediate_size: 128
  num_hidden_layers: 2
  num_attention_heads: 4
  max_position_embeddings: 512
)";

class BaseConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // Writes `text` to dir_/name (folders made) and returns the path.
  std::string put(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Three levels, each overriding the one below, and --set over all of them.
TEST_F(BaseConfig, ChainOfThreeWithOverridesAtEachLevelAndSet) {
  put("configs/base.yaml", std::string(kModel) +
                               "data:\n  sources: [{path: a.txt}]\n  seq_len: 64\n"
                               "train:\n  lr: 0.001\n  max_steps: 50\n  warmup_steps: 5\n"
                               "  min_lr: 0.0001\n");
  put("configs/mid.yaml",
      "base_config: base.yaml\ntrain:\n  lr: 0.002\n  warmup_steps: 7\n"
      "model:\n  num_hidden_layers: 3\n");
  const std::string run = put("run.yaml",
                              "base_config: configs/mid.yaml\ntrain:\n  lr: 0.003\n"
                              "model:\n  num_hidden_layers: 4\n");
  RunConfig c = load_run_config(run, {"train.max_steps=9", "model.num_hidden_layers=5"});
  EXPECT_EQ(c.train.lr, 0.003);        // the file's own key over both bases
  EXPECT_EQ(c.train.warmup_steps, 7);  // mid over base
  EXPECT_EQ(c.train.min_lr, 0.0001);   // only in base
  EXPECT_EQ(c.train.max_steps, 9);     // --set over everything
  EXPECT_EQ(c.model.num_hidden_layers, 5);
  EXPECT_EQ(c.model.hidden_size, 64);  // base's model section merged, not replaced
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.config_file, run);
  const std::string mid = at("configs/mid.yaml"), base = at("configs/base.yaml");
  ASSERT_EQ(c.base_files.size(), 2u);
  EXPECT_EQ(c.base_files[0], run + " -> " + mid + " -> " + base);  // applied first
  EXPECT_EQ(c.base_files[1], run + " -> " + mid);
  RunConfig without = load_run_config(run, {});
  EXPECT_EQ(without.train.max_steps, 50);
  EXPECT_EQ(without.model.num_hidden_layers, 4);
}

// A list replaces the base's list (no element-wise merge); a map merges key by key, inside list
// elements too only when the list is not replaced; a scalar replaces; an empty section keeps the
// base's.
TEST_F(BaseConfig, ListsReplaceMapsMerge) {
  put("base.yaml", std::string(kModel) +
                       "data:\n  sources:\n    - {path: a.txt, weight: 2, exclude: ['*.dat']}\n"
                       "    - {path: b.txt}\n  seq_len: 64\n  val_fraction: 0.1\n"
                       "train:\n  lr: 0.001\n  max_steps: 50\n");
  const std::string run = put("run.yaml",
                              "base_config: base.yaml\ndata:\n  sources: [{path: c.txt}]\n"
                              "  val_fraction: 0.2\ntrain:\nlogging:\n  console: false\n");
  RunConfig c = load_run_config(run, {});
  ASSERT_EQ(c.data.sources.size(), 1u);
  EXPECT_EQ(c.data.sources[0].path, "c.txt");
  EXPECT_EQ(c.data.sources[0].weight, 1.0);  // not the base's first element's weight
  EXPECT_TRUE(c.data.sources[0].exclude.empty());
  EXPECT_EQ(c.data.seq_len, 64);        // the data map merged
  EXPECT_EQ(c.data.val_fraction, 0.2);  // a scalar replaced
  EXPECT_EQ(c.train.lr, 0.001);         // `train:` with nothing keeps the base's section
  EXPECT_EQ(c.train.max_steps, 50);
  EXPECT_FALSE(c.logging.console);
  // The base alone keeps its list whole.
  RunConfig b = load_run_config(at("base.yaml"), {});
  ASSERT_EQ(b.data.sources.size(), 2u);
  EXPECT_EQ(b.data.sources[0].exclude, std::vector<std::string>{"*.dat"});
}

// A list of bases applies in order: the second over the first, the file over both. Each base may
// hold a single section.
TEST_F(BaseConfig, ListOfBasesAppliesInOrder) {
  put("shape.yaml", std::string(kModel) + "  num_key_value_heads: 4\n");
  put("attn.yaml", "model:\n  num_key_value_heads: 2\n  rope_theta: 500000.0\n");
  put("data.yaml", "data:\n  sources: [{path: a.txt}]\n  seq_len: 32\n");
  const std::string run = put("run.yaml",
                              "base_config: [shape.yaml, attn.yaml, data.yaml]\nmodel:\n"
                              "  rope_theta: 10000.5\n");
  RunConfig c = load_run_config(run, {});
  EXPECT_EQ(c.model.num_key_value_heads, 2);  // attn.yaml over shape.yaml
  EXPECT_EQ(c.model.rope_theta, 10000.5);     // the file over both
  EXPECT_EQ(c.model.hidden_size, 64);         // only in shape.yaml
  EXPECT_EQ(c.data.seq_len, 32);
  ASSERT_EQ(c.base_files.size(), 3u);
  EXPECT_EQ(c.base_files[0], run + " -> " + at("shape.yaml"));
  EXPECT_EQ(c.base_files[1], run + " -> " + at("attn.yaml"));
  // The other order: shape.yaml's value wins.
  put("run2.yaml", "base_config: [attn.yaml, shape.yaml, data.yaml]\n");
  EXPECT_EQ(load_run_config(at("run2.yaml"), {}).model.num_key_value_heads, 4);
}

// Paths are relative to the file that names them, at every level; an absolute path works too.
TEST_F(BaseConfig, PathsAreRelativeToTheNamingFile) {
  put("common/parts/model.yaml", kModel);
  put("common/base.yaml",
      "base_config: parts/model.yaml\ndata:\n  sources: [{path: a.txt}]\n  seq_len: 16\n");
  put("exp/sub/run.yaml", "base_config: ../../common/base.yaml\ntrain:\n  lr: 0.01\n");
  RunConfig c = load_run_config(at("exp/sub/run.yaml"), {});
  EXPECT_EQ(c.model.hidden_size, 64);
  EXPECT_EQ(c.data.seq_len, 16);
  EXPECT_EQ(c.train.lr, 0.01);
  put("abs.yaml", "base_config: " + at("common/base.yaml") + "\n");
  EXPECT_EQ(load_run_config(at("abs.yaml"), {}).data.seq_len, 16);
  // Relative to the naming file, not to the working directory: from another directory the same.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_ / "exp");
  RunConfig rel = load_run_config("sub/run.yaml", {});
  fs::current_path(cwd);
  EXPECT_EQ(rel.data.seq_len, 16);
  EXPECT_EQ(rel.base_files.back(), "sub/run.yaml -> sub/../../common/base.yaml");
}

TEST_F(BaseConfig, CycleIsNamedWithItsChain) {
  const std::string a = put("a.yaml", "base_config: b.yaml\ntrain:\n  lr: 0.1\n");
  const std::string b = put("b.yaml", "base_config: [c.yaml, a.yaml]\n");
  put("c.yaml", kModel);
  const std::string msg = expect_user_error([&] { load_run_config(a, {}); }, {});
  EXPECT_EQ(msg, a + " -> " + b + " -> " + a + ": base_config cycle");
  const std::string self = put("self.yaml", "base_config: ./self.yaml\n");
  expect_user_error([&] { load_run_config(self, {}); },
                    {self + " -> " + at("./self.yaml") + ": base_config cycle"});
  // A diamond (two bases sharing one) is no cycle.
  put("left.yaml", "base_config: c.yaml\ntrain:\n  lr: 0.2\n");
  put("right.yaml", "base_config: c.yaml\ntrain:\n  max_steps: 3\n");
  put("top.yaml", "base_config: [left.yaml, right.yaml]\ndata:\n  sources: [{path: a.txt}]\n");
  RunConfig d = load_run_config(at("top.yaml"), {});
  EXPECT_EQ(d.train.lr, 0.2);
  EXPECT_EQ(d.train.max_steps, 3);
}

TEST_F(BaseConfig, MissingOrUnreadableBaseNamesTheChain) {
  const std::string run = put("run.yaml", "base_config: [mid.yaml]\n");
  put("mid.yaml", "base_config: nope.yaml\n");
  const std::string chain = run + " -> " + at("mid.yaml") + " -> " + at("nope.yaml");
  const std::string msg = expect_user_error([&] { load_run_config(run, {}); }, {});
  EXPECT_EQ(msg, chain + ": base_config file '" + at("nope.yaml") + "' not found");
  fs::create_directories(dir_ / "folder");
  put("dir.yaml", "base_config: folder\n");
  expect_user_error([&] { load_run_config(at("dir.yaml"), {}); },
                    {at("dir.yaml") + " -> " + at("folder") + ": ", "is a directory"});
  ASSERT_EQ(::mkfifo(at("fifo.yaml").c_str(), 0600), 0);
  put("fifo_run.yaml", "base_config: fifo.yaml\n");
  expect_user_error([&] { load_run_config(at("fifo_run.yaml"), {}); },
                    {at("fifo_run.yaml") + " -> " + at("fifo.yaml") + ": ", "a FIFO"});
  put("syntax.yaml", "train:\n  lr: [1, 2\nmodel:\n");
  put("syntax_run.yaml", "base_config: syntax.yaml\n");
  expect_user_error(
      [&] { load_run_config(at("syntax_run.yaml"), {}); },
      {at("syntax_run.yaml") + " -> " + at("syntax.yaml") + ":3:", "YAML syntax error"});
}

TEST_F(BaseConfig, ABaseMustBeAMapOfSections) {
  put("list.yaml", "- model\n- data\n");
  const std::string run = put("run.yaml", "base_config: list.yaml\n");
  const std::string msg = expect_user_error([&] { load_run_config(run, {}); }, {});
  EXPECT_EQ(msg, run + " -> " + at("list.yaml") +
                     ":1: a base config must be a map of sections, got a list");
  put("scalar.yaml", "just text\n");
  put("run2.yaml", "base_config: scalar.yaml\n");
  expect_user_error([&] { load_run_config(at("run2.yaml"), {}); },
                    {"must be a map of sections, got 'just text'"});
  put("empty.yaml", "");  // nothing: a base that adds nothing
  put("run3.yaml",
      "base_config: empty.yaml\n" + std::string(kModel) + "data:\n  sources: [{path: a.txt}]\n");
  EXPECT_EQ(load_run_config(at("run3.yaml"), {}).model.hidden_size, 64);
  // base_config itself must name files.
  for (const char* bad : {"base_config: {a: b}\n", "base_config: [a.yaml, [b.yaml]]\n",
                          "base_config:\n", "base_config: ''\n"}) {
    put("bad.yaml", bad);
    expect_user_error([&] { load_run_config(at("bad.yaml"), {}); },
                      {at("bad.yaml") + ":1: key 'base_config': "});
  }
}

// A bad key in a base is named at that base (its chain) and line; the same key in the file itself
// is named at the file, and a --set still names its argument.
TEST_F(BaseConfig, KeyErrorsNameTheFileTheKeyCameFrom) {
  put("base.yaml", std::string(kModel) + "data:\n  sources: [{path: a.txt}]\ntrain:\n  lrr: 1\n");
  const std::string run = put("run.yaml", "base_config: base.yaml\ntrain:\n  lr: 0.1\n");
  const std::string chain = run + " -> " + at("base.yaml");
  expect_user_error([&] { load_run_config(run, {}); },
                    {chain + ":11: unknown key 'train.lrr'; did you mean 'train.lr'?"});

  put("base.yaml", std::string(kModel) + "train:\n  max_steps: many\n");
  expect_user_error([&] { load_run_config(run, {}); },
                    {chain + ":9: key 'train.max_steps': expected an integer, got 'many'"});
  // The file's own value over the base's bad one: no error.
  put("run_fix.yaml",
      "base_config: base.yaml\ndata:\n  sources: [{path: a.txt}]\ntrain:\n  max_steps: 3\n");
  EXPECT_EQ(load_run_config(at("run_fix.yaml"), {}).train.max_steps, 3);

  // A bad value in the file itself names the file, as without bases.
  put("base.yaml", std::string(kModel) + "data:\n  sources: [{path: a.txt}]\n");
  put("run_bad.yaml", "base_config: base.yaml\ntrain:\n  max_steps: many\n");
  const std::string own =
      expect_user_error([&] { load_run_config(at("run_bad.yaml"), {}); },
                        {at("run_bad.yaml") + ":3: key 'train.max_steps': expected an integer"});
  EXPECT_EQ(own.find(" -> "), std::string::npos) << own;

  // Validation: a value out of range that a base gave is named at the base and its line.
  put("base.yaml", std::string(kModel) + "data:\n  sources: [{path: a.txt}]\ntrain:\n  lr: -1\n");
  put("run_plain.yaml", "base_config: base.yaml\n");
  expect_user_error(
      [&] { load_run_config(at("run_plain.yaml"), {}); },
      {at("run_plain.yaml") + " -> " + at("base.yaml") + ":11: train.lr must be > 0"});
  // ... and after a --set, at the file the run was started with.
  const std::string set =
      expect_user_error([&] { load_run_config(at("run_plain.yaml"), {"train.lr=-2"}); },
                        {at("run_plain.yaml") + ": train.lr must be > 0 (got -2)"});
  EXPECT_EQ(set.find(" -> "), std::string::npos) << set;
  expect_user_error([&] { load_run_config(at("run_plain.yaml"), {"train.lrr=1"}); },
                    {"unknown key 'train.lrr'", "(from --set 'train.lrr=1')"});
  // A list element's key in a base.
  put("base.yaml", std::string(kModel) + "data:\n  sources:\n    - path: a.txt\n      weight: 0\n");
  expect_user_error([&] { load_run_config(at("run_plain.yaml"), {}); },
                    {at("base.yaml") + ":11: data.sources[0].weight must be > 0"});
}

// A key written twice in a base is refused even where a later file gives the key again.
TEST_F(BaseConfig, ARepeatedKeyInABaseIsRefused) {
  put("base.yaml", std::string(kModel) + "train:\n  lr: 0.1\n  lr: 0.2\n");
  const std::string run = put("run.yaml",
                              "base_config: base.yaml\ndata:\n  sources: [{path: a.txt}]\ntrain:\n"
                              "  lr: 0.3\n");
  expect_user_error(
      [&] { load_run_config(run, {}); },
      {run + " -> " + at("base.yaml") + ":10: key 'train.lr' appears twice (first on line 9)"});
}

// The run directory's record: the chain and the --set arguments as comments, then every key. It
// loads as it is, to the same config (the same hash), and applies no base again.
TEST_F(BaseConfig, RecordNamesTheChainAndLoadsAsItIs) {
  put("configs/base.yaml", std::string(kModel) + "data:\n  sources: [{path: a.txt}]\n");
  const std::string run = put("run.yaml", "base_config: configs/base.yaml\ntrain:\n  lr: 0.01\n");
  RunConfig c = load_run_config(run, {"train.max_steps=7"});
  const std::string record = run_config_record(c);
  EXPECT_EQ(record.rfind("# The resolved run config", 0), 0u) << record;
  EXPECT_NE(record.find("# config: " + run + "\n"), std::string::npos) << record;
  EXPECT_NE(record.find("#   " + run + " -> " + at("configs/base.yaml") + "\n"), std::string::npos)
      << record;
  EXPECT_NE(record.find("# --set train.max_steps=7\n"), std::string::npos) << record;
  EXPECT_EQ(record.find("base_config:"), std::string::npos) << record;  // no key of that name
  EXPECT_NE(record.find(run_config_to_yaml(c)), std::string::npos);
  // Loaded back, with the base file gone: the same values and hash.
  const std::string saved = put("saved/config.yaml", record);
  fs::remove(at("configs/base.yaml"));
  RunConfig back = load_run_config(saved, {});
  EXPECT_EQ(run_config_hash(back), run_config_hash(c));
  EXPECT_TRUE(back.base_files.empty());
  EXPECT_EQ(back.train.max_steps, 7);
  // A config built in code has no record of files: the text is the YAML alone.
  RunConfig plain;
  EXPECT_EQ(run_config_record(plain), run_config_to_yaml(plain));
  // Names that hold a newline cannot end the comment.
  c.overrides = {"train.sample_prompt=a\nmodel: {}"};
  EXPECT_NE(run_config_record(c).find("# --set train.sample_prompt=a?model: {}\n"),
            std::string::npos);
}

}  // namespace
}  // namespace lmt
