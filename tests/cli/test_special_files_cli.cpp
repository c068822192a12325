// Every file lmtrain reads must be a regular file: a FIFO (which would block a reader forever), a
// symbolic link to /dev/zero or /dev/urandom (which never end) and a symbolic link loop are each
// refused with one message naming the file and exit code 2, at once, whichever command reads them
// (a config, a tokenizer, a data source, a model directory's files).
// Each command runs under `timeout 20`, so that a reader that blocks fails the test instead of
// hanging it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli/cli_util.h"
#include "export/export_test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

const std::string kTiny =
    " --set model.hidden_size=32 --set model.num_hidden_layers=1 --set model.num_attention_heads=2"
    " --set model.intermediate_size=40 --set model.vocab_size=97";

// `args` under a 20 s timeout: exit 2, one line "lmtrain: error: ..." naming `path`, within 5 s.
void expect_refused(const std::string& args, const fs::path& path, const std::string& why) {
  SCOPED_TRACE(args);
  const auto start = std::chrono::steady_clock::now();
  const Result r = capture("timeout 20 " + std::string(LMT_BINARY) + " " + args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("lmtrain: error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_NE(r.out.find(path.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  EXPECT_LT(s, 5.0) << r.out;
}

TEST(SpecialFiles, AreRefusedByNameAtOnce) {
  const fs::path dir = test::fresh_dir("special_files");
  fs::create_directories(dir);
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path loop_a = dir / "loop_a", loop_b = dir / "loop_b";
  fs::create_symlink(loop_b, loop_a);
  fs::create_symlink(loop_a, loop_b);
  const fs::path zero = dir / "zero.json", urandom = dir / "urandom.model";
  fs::create_symlink("/dev/zero", zero);
  fs::create_symlink("/dev/urandom", urandom);

  // --config: a FIFO, a loop, a device.
  expect_refused("train --config " + fifo.string(), fifo, "a FIFO");
  expect_refused("train --config " + loop_a.string(), loop_a, "");
  expect_refused("prepare --config " + zero.string(), zero, "a character device");
  // A tokenizer: tokenizer.json and tokenizer.model as devices and a FIFO.
  expect_refused("tokenize --tokenizer " + zero.string() + " --text hi", zero,
                 "a character device");
  expect_refused("tokenize --tokenizer " + urandom.string() + " --text hi", urandom,
                 "a character device");
  const fs::path fifo_json = dir / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo_json.c_str(), 0600), 0);
  expect_refused("tokenize --tokenizer " + fifo_json.string() + " --text hi", fifo_json, "a FIFO");

  // A data source of prepare.
  const fs::path source = dir / "source.jsonl", config = dir / "prepare.yaml";
  ASSERT_EQ(::mkfifo(source.c_str(), 0600), 0);
  std::ofstream(config) << "data:\n  tokenizer: bytes\n  store: " << (dir / "store").string()
                        << "\n  seq_len: 16\n  sources:\n    - path: " << source.string() << "\n";
  expect_refused("prepare --config " + config.string(), source, "neither a regular file");

  // A model directory whose config.json, model.safetensors or tokenizer.json is special.
  const fs::path model = dir / "model";
  Result r = run("init --family llama" + kTiny + " --out " + model.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path ids = dir / "ids.json";
  std::ofstream(ids) << "[1, 2, 3]";
  const std::string logits = "logits --model " + model.string() + " --ids-file " + ids.string() +
                             " --out " + (dir / "l.safetensors").string();
  for (const char* name : {"config.json", "model.safetensors"}) {
    SCOPED_TRACE(name);
    const fs::path f = model / name, kept = dir / (std::string(name) + ".kept");
    fs::rename(f, kept);
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    expect_refused(logits, f, "a FIFO");
    expect_refused("info --model " + model.string(), f, "a FIFO");
    fs::remove(f);
    fs::create_symlink("/dev/zero", f);
    expect_refused(logits, f, "a character device");
    fs::remove(f);
    fs::rename(kept, f);
  }
  ASSERT_EQ(::mkfifo((model / "tokenizer.json").c_str(), 0600), 0);
  expect_refused("tokenize --tokenizer " + model.string() + " --text hi", model / "tokenizer.json",
                 "a FIFO");
}

}  // namespace
}  // namespace lmt
