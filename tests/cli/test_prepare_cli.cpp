// lmtrain prepare and train's checks of a store: progress and summary, the manifest compared with
// the model and config (each mismatch one message, exit 2), and memory that stays bounded for an
// input several times larger than the cap.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

class PrepareCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_prep_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream f(dir_ / "data.txt");
    for (int i = 0; i < 400; ++i) f << "line " << i << " of a small corpus for the store tests\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string config(const std::string& data_extra = "", int vocab = 257) {
    const fs::path p = dir_ / "run.yaml";
    std::ofstream f(p);
    f << "model:\n  vocab_size: " << vocab
      << "\n  hidden_size: 16\n  intermediate_size: 24\n"
         "  num_hidden_layers: 1\n  num_attention_heads: 2\n  max_position_embeddings: 64\n"
         "data:\n  sources:\n    - path: "
      << (dir_ / "data.txt").string()
      << "\n      split: line\n  seq_len: 16\n  val_fraction: 0.1\n  store: "
      << (dir_ / "store").string() << "\n"
      << data_extra
      << "train:\n  max_steps: 2\n  micro_batch_size: 2\n  eval_every: 0\n  eval_steps: 0\n"
         "  log_every: 1\n  out_dir: "
      << (dir_ / "out").string() << "\n";
    return p.string();
  }

  fs::path dir_;
};

TEST_F(PrepareCli, PrepareThenTrainFromTheStore) {
  Result p = run("prepare --config " + config());
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("MB/s"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("ETA"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("data.sources[0]"), std::string::npos) << p.out;
  EXPECT_TRUE(fs::exists(dir_ / "store" / "manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ / "store" / "train-00000.idx"));
  Result t = run("train --config " + config());
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("data: store " + (dir_ / "store").string()), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("prepared now"), std::string::npos) << t.out;
}

TEST_F(PrepareCli, TrainRefusesAStoreThatDoesNotMatch) {
  ASSERT_EQ(run("prepare --config " + config()).code, 0);
  Result r = run("train --config " + config() + " --set data.seq_len=32");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("prepared for seq_len 16, but data.seq_len is 32"), std::string::npos)
      << r.out;

  const std::string bpe = std::string(LMT_TEST_DATA) + "/tokenizers/bytelevel_bpe.json";
  r = run("train --config " + config("", 50000) + " --set data.tokenizer=" + bpe);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("prepared with tokenizer 'bytes'"), std::string::npos) << r.out;

  ASSERT_EQ(run("prepare --config " + config() + " --set data.tokenizer=" + bpe).code, 0);
  r = run("train --config " + config() + " --set data.tokenizer=" + bpe);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("but model.vocab_size is 257"), std::string::npos) << r.out;

  r = run("train --config " + config() + " --set data.store=" + (dir_ / "nothing").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("manifest.json: no such file"), std::string::npos) << r.out;
}

TEST_F(PrepareCli, TrainReadsAMegatronIndexedDatasetAsItIs) {
  ASSERT_EQ(run("prepare --config " + config()).code, 0);
  // A store shard is a Megatron PREFIX (.bin + .idx); name it alone, without the manifest.
  const std::string prefix = (dir_ / "store" / "train-00000").string();
  Result t = run("train --config " + config() + " --set data.store=" + prefix);
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("a Megatron-LM indexed dataset"), std::string::npos) << t.out;
  // The config's own check of vocab_size against 'bytes' aside (another tokenizer named), the
  // store's largest id decides.
  Result small = run("train --config " + config("", 100) + " --set data.store=" + prefix +
                     " --set data.tokenizer=" + LMT_TEST_DATA + "/tokenizers/bytelevel_bpe.json");
  EXPECT_EQ(small.code, 2) << small.out;
  EXPECT_NE(small.out.find("257 ids but model.vocab_size is 100"), std::string::npos) << small.out;
}

TEST_F(PrepareCli, MixedSourcesAreReportedAndCheckpointsCarryTheTokenizer) {
  {
    std::ofstream f(dir_ / "more.txt");
    for (int i = 0; i < 100; ++i) f << "another source, line " << i << "\n";
  }
  const std::string bpe = std::string(LMT_TEST_DATA) + "/tokenizers/bytelevel_bpe.json";
  const std::string sets = " --set data.tokenizer=" + bpe +
                           " --set 'data.sources=[{path: " + (dir_ / "data.txt").string() +
                           ", split: line}, {path: " + (dir_ / "more.txt").string() +
                           ", split: line, weight: 3}]'";
  Result p = run("prepare --config " + config("", 1024) + sets);
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("data.sources[1]"), std::string::npos) << p.out;
  Result t = run("train --config " + config("", 1024) + sets);
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("mixture per epoch: source 0 weight 1"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("source 1 weight 3"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "checkpoints" / "step_0000002" / "tokenizer.json"));
  Result g = run("generate --checkpoint " + (dir_ / "out").string() +
                 " --prompt 'line 1' --max-new-tokens 4");
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(g.out.rfind("line 1", 0), 0u) << g.out;
}

TEST_F(PrepareCli, SftChatsTrainWithDocumentMasking) {
  {
    std::ofstream f(dir_ / "chats.jsonl");
    for (int i = 0; i < 80; ++i)
      f << "{\"messages\": [{\"role\": \"user\", \"content\": \"what is " << i
        << "?\"}, {\"role\": \"assistant\", \"content\": \"it is " << i << ".\"}]}\n";
  }
  const std::string sets = " --set 'data.sources=[{path: " + (dir_ / "chats.jsonl").string() +
                           ", format: jsonl, schema: chat}]' --set data.seq_len=64";
  ASSERT_EQ(run("prepare --config " + config() + sets).code, 0);
  Result small = run("train --config " + config() + sets);  // every chat is > 65 tokens
  EXPECT_EQ(small.code, 2) << small.out;
  EXPECT_NE(small.out.find("bin packing never splits a document, and 74 of them are longer"),
            std::string::npos)
      << small.out;
  const std::string cfg =
      config() + sets + " --set data.seq_len=200 --set model.max_position_embeddings=256";
  Result p = run("prepare --config " + cfg);
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("packing bin"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("loss on"), std::string::npos) << p.out;
  Result t = run("train --config " + cfg +
                 " --set train.document_masking=true --set train.eval_every=1"
                 " --set train.eval_steps=1");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("val loss"), std::string::npos) << t.out;
}

// A text source with a binary file and a line that is not UTF-8: prepare stops naming the file
// (exit 2, no store); with on_error: skip it writes the store and reports what it left out, as
// does tokenizer training from the config.
TEST_F(PrepareCli, BinaryAndInvalidUtf8TextIsRefusedOrCounted) {
  fs::create_directories(dir_ / "mixed");
  std::ofstream(dir_ / "mixed" / "a.txt") << "good text\nbad \xc3\x28 text\nmore good\n";
  std::ofstream(dir_ / "mixed" / "b.png", std::ios::binary) << std::string("\x89PNG\x0d\x0a\x1a\x0a\x00\x00", 10);
  const std::string cfg = config();
  const std::string set = " --set data.sources.0.path=" + (dir_ / "mixed").string();
  Result stop = run("prepare --config " + cfg + set);
  EXPECT_EQ(stop.code, 2) << stop.out;
  EXPECT_NE(stop.out.find((dir_ / "mixed" / "a.txt").string() +
                          ":2: the document starting on this line is not valid UTF-8"),
            std::string::npos)
      << stop.out;
  EXPECT_FALSE(fs::exists(dir_ / "store"));
  Result bin = run("prepare --config " + cfg + set + " --set data.sources.0.exclude=[a.txt]");
  EXPECT_EQ(bin.code, 2) << bin.out;
  EXPECT_NE(bin.out.find("b.png: a binary file (a NUL byte at offset 8); leave it out with "
                         "data.sources[0].exclude"),
            std::string::npos)
      << bin.out;
  const std::string skip = set + " --set data.sources.0.on_error=skip";
  Result ok = run("prepare --config " + cfg + skip);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("2 files, 2 documents"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("skipped 2: binary file 1, invalid UTF-8 1"), std::string::npos) << ok.out;
  Result tok = run("tokenizer train --config " + cfg + skip + " --vocab-size 260 --out " +
                   (dir_ / "tok.json").string());
  ASSERT_EQ(tok.code, 0) << tok.out;
  EXPECT_NE(tok.out.find("learned from 2 documents of 1 source(s); skipped 2: binary file 1, "
                         "invalid UTF-8 1"),
            std::string::npos)
      << tok.out;
}

TEST_F(PrepareCli, PrepareNeedsSomewhereToWrite) {
  Result r = run("prepare --config " + config() + " --set data.store=");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--out DIR"), std::string::npos) << r.out;
  r = run("prepare --config " + config() +
          " --set data.sources.0.path=" + (dir_ / "missing.txt").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("missing.txt"), std::string::npos) << r.out;
}

// A tokenizer.json whose ids the store cannot hold is refused at load, exit 2 with the file and
// the field, by tokenize and by prepare alike (an id of 2^31 - 1 used to crash both; an empty
// vocab made prepare write a store of end-of-text tokens only).
TEST_F(PrepareCli, TokenizerWithBadIdsExitsTwo) {
  const std::string model = R"("model": {"type": "BPE", "merges": [], "vocab": )";
  const std::pair<std::string, std::string> cases[] = {
      {"{" + model + R"({"a": 0, "b": 2147483647}}})",
       R"(model.vocab["b"]: id 2147483647 is not below 2^31 - 1)"},
      {"{" + model + R"({"a": 0}}, "added_tokens": [{"content": "<s>", "id": 4294967301}]})",
       "added_tokens[0].id: id 4294967301 is not below 2^31 - 1"},
      {"{" + model + R"({"a": 0, "b": 0}}})",
       R"(model.vocab["b"]: id 0 is also the id of "a" in model.vocab)"},
      {"{" + model + "{}}}", "model.vocab: empty"},
  };
  int n = 0;
  for (const auto& [text, needle] : cases) {
    const std::string tok = (dir_ / ("tok" + std::to_string(n++) + ".json")).string();
    std::ofstream(tok) << text;
    Result r = run("tokenize --tokenizer " + tok + " --text ab");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("tokenizer " + tok + ": " + needle), std::string::npos) << r.out;
    r = run("prepare --config " + config() + " --set data.tokenizer=" + tok);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("tokenizer " + tok + ": " + needle), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "store" / "manifest.json")) << needle;
  }
}

// Peak resident memory (bytes) of a shell command run to completion, and its exit code.
std::pair<long, int> peak_rss(const std::string& cmd) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  return {ru.ru_maxrss * 1024L, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// What prepare holds beyond the binary's own resident memory (its code and libraries, measured as
// `lmtrain --version`'s peak, about 17 MB) stays under kCap for an input three times that: the
// bound is on the working set, so that a larger binary does not move it.
TEST_F(PrepareCli, MemoryStaysBoundedForAnInputThreeTimesTheCap) {
  constexpr long kCap = 36L << 20;  // bytes of resident memory prepare may use beyond the binary's
  const fs::path big = dir_ / "big.jsonl";
  {
    std::ofstream f(big);
    std::string words;
    for (int k = 0; k < 60; ++k) words += "word" + std::to_string(k) + " ";
    long written = 0;
    for (int i = 0; written < 3 * kCap; ++i) {
      std::string line = "{\"text\": \"" + std::to_string(i) + " " + words + "\"}\n";
      f << line;
      written += static_cast<long>(line.size());
    }
  }
  const std::string cfg = config();
  auto [rss, code] = peak_rss(std::string(LMT_BINARY) + " prepare --quiet --config " + cfg +
                              " --set data.sources.0.path=" + big.string() +
                              " --set data.sources.0.format=jsonl > /dev/null 2>&1");
  ASSERT_EQ(code, 0);
  const long base = peak_rss(std::string(LMT_BINARY) + " --version > /dev/null").first;
  std::printf("prepare of %.0f MB: peak RSS %.1f MB, %.1f MB beyond the binary's %.1f MB (cap %.0f "
              "MB)\n",
              static_cast<double>(fs::file_size(big)) / 1e6, static_cast<double>(rss) / 1e6,
              static_cast<double>(rss - base) / 1e6, static_cast<double>(base) / 1e6,
              static_cast<double>(kCap) / 1e6);
  EXPECT_LT(rss - base, kCap);
}

}  // namespace
