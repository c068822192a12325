// The lmtrain binary as a user meets it: --help and --version, and every user error is one clear
// message naming the file, key or flag, with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "data.txt") << "first document\n%\nsecond one, a little longer\n%\n"
                                        "third document here\n%\nfourth\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small valid config; `extra` lines are appended (later keys of a section override).
  std::string config(const std::string& train_extra = "", const std::string& model_extra = "") {
    const fs::path p = dir_ / "run.yaml";
    std::ofstream f(p);
    f << "model:\n  vocab_size: 257\n  hidden_size: 16\n  intermediate_size: 24\n"
         "  num_hidden_layers: 1\n  num_attention_heads: 2\n  max_position_embeddings: 64\n"
      << model_extra << "data:\n  sources:\n    - path: " << (dir_ / "data.txt").string()
      << "\n  seq_len: 8\n  val_fraction: 0.0\n"
         "train:\n  max_steps: 2\n  micro_batch_size: 2\n  eval_every: 0\n  eval_steps: 0\n"
         "  log_every: 1\n  out_dir: "
      << (dir_ / "out").string() << "\n"
      << train_extra;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(Cli, VersionAndHelp) {
  Result v = run("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("lmtrain "), std::string::npos);
  for (const char* sub : {"train", "bench"}) {
    Result h = run(std::string(sub) + " --help");
    EXPECT_EQ(h.code, 0) << sub;
    EXPECT_NE(h.out.find("--config"), std::string::npos) << sub << h.out;
    EXPECT_NE(h.out.find("--set"), std::string::npos) << sub << h.out;
  }
  EXPECT_NE(run("train --help").out.find("--resume"), std::string::npos);
  Result g = run("generate --help");
  for (const char* flag : {"--checkpoint", "--prompt", "--max-new-tokens", "--temperature",
                           "--top-k", "--top-p", "--seed"})
    EXPECT_NE(g.out.find(flag), std::string::npos) << flag;
}

TEST_F(Cli, UnknownSubcommandOrFlagExits2) {
  EXPECT_EQ(run("frobnicate").code, 2);
  Result r = run("train --config x.yaml --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--bogus"), std::string::npos) << r.out;
}

TEST_F(Cli, MissingConfigFile) {
  Result r = run("train --config " + (dir_ / "nope.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("nope.yaml"), std::string::npos) << r.out;
}

TEST_F(Cli, UnknownKey) {
  Result r = run("train --config " + config("  lrr: 0.1\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("train.lrr"), std::string::npos) << r.out;
}

TEST_F(Cli, WrongType) {
  Result r = run("train --config " + config("  max_steps: many\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("train.max_steps"), std::string::npos) << r.out;
}

TEST_F(Cli, NegativeLearningRate) {
  Result r = run("train --config " + config() + " --set train.lr=-0.001");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("train.lr"), std::string::npos) << r.out;
}

TEST_F(Cli, NonFiniteHyperParameters) {
  for (const char* set : {"train.lr=.inf", "train.weight_decay=.inf", "optimizer.eps=.inf",
                          "train.grad_clip=.nan", "optimizer.beta1=-.inf"}) {
    Result r = run("train --config " + config() + " --set " + set);
    EXPECT_EQ(r.code, 2) << set << "\n" << r.out;
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    EXPECT_NE(r.out.find(key + " must be a finite number"), std::string::npos) << r.out;
  }
}

// Sizes no machine here can hold are refused before anything is allocated (they were a
// std::bad_alloc, exit 1), naming the key and both numbers.
TEST_F(Cli, RunTooBigForMemory) {
  struct Case {
    const char* set;
    const char* key;
  };
  for (const Case& c : {Case{"train.grad_accum_steps=1000000000", "train.grad_accum_steps"},
                        Case{"train.micro_batch_size=1000000000", "train.micro_batch_size"},
                        Case{"model.hidden_size=1048576", "model.hidden_size"}}) {
    Result r = run("train --config " + config() + " --set " + c.set);
    EXPECT_EQ(r.code, 2) << c.set << "\n" << r.out;
    EXPECT_NE(r.out.find("lower " + std::string(c.key)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("GiB of memory but this machine has"), std::string::npos) << r.out;
  }
  Result b = run("bench --config " + config() + " --set train.grad_accum_steps=1000000000");
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_NE(b.out.find("lower train.grad_accum_steps"), std::string::npos) << b.out;
}

TEST_F(Cli, MissingDataFile) {
  Result r2 = run("train --config " + config() +
                  " --set 'data.sources=[{path: " + (dir_ / "gone.txt").string() + "}]'");
  EXPECT_EQ(r2.code, 2);
  EXPECT_NE(r2.out.find("gone.txt"), std::string::npos) << r2.out;
  EXPECT_NE(r2.out.find("data.sources[0]"), std::string::npos) << r2.out;
}

TEST_F(Cli, SeqLenAboveMaxPositions) {
  Result r = run("train --config " + config() + " --set data.seq_len=128");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("data.seq_len"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_position_embeddings"), std::string::npos) << r.out;
}

TEST_F(Cli, MalformedSet) {
  Result r = run("train --config " + config() + " --set train.lr");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("train.lr"), std::string::npos) << r.out;
}

TEST_F(Cli, TrainThenGenerate) {
  Result t = run("train --config " + config());
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("step      2/2"), std::string::npos) << t.out;
  Result g = run("generate --checkpoint " + (dir_ / "out").string() +
                 " --prompt 'first' --max-new-tokens 5 --seed 3");
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(g.out.rfind("first", 0), 0u) << g.out;
  Result g2 = run("generate --checkpoint " + (dir_ / "out").string() +
                  " --prompt 'first' --max-new-tokens 5 --seed 3");
  EXPECT_EQ(g.out, g2.out);  // the seed reproduces the sample
  Result bad = run("generate --checkpoint " + (dir_ / "missing").string() + " --prompt x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("missing"), std::string::npos) << bad.out;
}

// Every family trains from a YAML config, checkpoints, and generates from its checkpoint (which
// reads the family back from the checkpoint's config.json).
TEST_F(Cli, EveryFamilyTrainsAndGenerates) {
  for (const char* family :
       {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2"}) {
    SCOPED_TRACE(family);
    fs::remove_all(dir_ / "out");
    Result t = run("train --config " + config() + " --set model.family=" + family +
                   " --set model.head_dim=8");
    ASSERT_EQ(t.code, 0) << t.out;
    EXPECT_NE(t.out.find("step      2/2"), std::string::npos) << t.out;
    std::ifstream cj(dir_ / "out" / "checkpoints" / "step_0000002" / "config.json");
    ASSERT_TRUE(cj.good());
    const auto j = nlohmann::json::parse(cj);
    EXPECT_EQ(j["model_type"], std::string(family) == "gemma3" ? "gemma3_text" : family);
    Result g = run("generate --checkpoint " + (dir_ / "out").string() +
                   " --prompt 'first' --max-new-tokens 4 --seed 3");
    ASSERT_EQ(g.code, 0) << g.out;
    EXPECT_EQ(g.out.rfind("first", 0), 0u) << g.out;
  }
}

TEST_F(Cli, NonFiniteLossStopsWithoutCheckpoint) {
  Result r = run("train --config " +
                 config("  grad_clip: 0.0\n  warmup_steps: 0\n  "
                        "schedule: constant\n  save_every: 1\n") +
                 " --set train.lr=1e30 --set train.max_steps=20");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("no checkpoint was written"), std::string::npos) << r.out;
  // The first step is computed from finite weights; the run stops at the first bad step, and
  // every checkpoint on disk comes from a step before it.
  for (const auto& e : fs::directory_iterator(dir_ / "out" / "checkpoints")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.rfind("step_", 0), 0u) << name;
    const int step = std::stoi(name.substr(5));
    EXPECT_LT(step, std::stoi(r.out.substr(r.out.find("stopped: step ") + 14))) << r.out;
  }
}

TEST_F(Cli, SigtermStopsWithACheckpointAndResumeContinues) {
  const std::string cfg = config("  save_every: 0\n", "") + " --set train.max_steps=1000000";
  // The run gets SIGTERM once it has logged a step; it must write a checkpoint and exit with 143
  // (128 + SIGTERM).
  Result r = run_shell("(" + std::string(LMT_BINARY) + " train --config " + cfg +
                       " > /dev/null 2>&1 & pid=$!; for i in $(seq 300); do [ -s " +
                       (dir_ / "out" / "metrics.jsonl").string() +
                       " ] && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;
  bool found = false;
  for (const auto& e : fs::directory_iterator(dir_ / "out" / "checkpoints"))
    found = found || e.path().filename().string().rfind("step_", 0) == 0;
  EXPECT_TRUE(found);
  Result g =
      run("generate --checkpoint " + (dir_ / "out").string() + " --prompt x --max-new-tokens 2");
  EXPECT_EQ(g.code, 0) << g.out;
}

// Two train processes on one out_dir: the second is refused (exit 2, naming the directory and
// the first's pid) while the first runs on; once the first has stopped, the directory is free.
TEST_F(Cli, SecondTrainOnTheSameDirectoryIsRefused) {
  const std::string cfg = config("  save_every: 0\n", "") + " --set train.max_steps=1000000";
  const std::string metrics = (dir_ / "out" / "metrics.jsonl").string();
  Result r = run_shell("(" + std::string(LMT_BINARY) + " train --config " + cfg +
                       " > /dev/null 2>&1 & pid=$!; for i in $(seq 300); do [ -s " + metrics +
                       " ] && break; sleep 0.1; done; echo first=$pid; " + std::string(LMT_BINARY) +
                       " train --config " + cfg +
                       "; echo second_rc=$?; kill -0 $pid && echo first_alive; kill -TERM $pid; "
                       "wait $pid; echo first_rc=$?)");
  EXPECT_NE(r.out.find("second_rc=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is in use by another lmtrain process (pid "), std::string::npos) << r.out;
  const size_t at = r.out.find("first=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string pid = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
  EXPECT_NE(r.out.find("(pid " + pid + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first_alive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first_rc=143"), std::string::npos) << r.out;
  Result again = run("train --config " + cfg + " --resume --set train.max_steps=2");
  EXPECT_EQ(again.code, 0) << again.out;
}

// --resume takes an optional checkpoint name; one that is not there is exit 2 listing those that
// are.
TEST_F(Cli, ResumeFromANamedCheckpoint) {
  const std::string cfg = config("  save_every: 1\n  keep_last: 0\n");
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  Result r = run("train --config " + cfg + " --resume step_0000001 --set train.max_steps=3");
  EXPECT_EQ(r.code, 0) << r.out;
  // The old line's newer checkpoint is set aside, not deleted, and not picked by a plain --resume.
  EXPECT_NE(r.out.find("set aside 1 newer checkpoint(s) of the run resumed from an older point: "
                       "step_0000002"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "checkpoints" / "abandoned" / "step_0000002" /
                         "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "checkpoints" / "step_0000003"));
  Result bad = run("train --config " + cfg + " --resume step_0000042");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--resume step_0000042: no checkpoint of that name"), std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("step_0000001"), std::string::npos) << bad.out;
  Result latest = run("train --config " + cfg + " --set train.max_steps=4 --resume");
  EXPECT_EQ(latest.code, 0) << latest.out;
}

// Resuming a run that has reached max_steps trains nothing and says so (it printed "last loss
// 0.0000"); raising max_steps then continues it.
TEST_F(Cli, ResumingAFinishedRunSaysThereIsNothingToDo) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  Result r = run("train --config " + cfg + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nothing to do: the checkpoint is at step 2 and train.max_steps is 2 "
                       "(raise train.max_steps to train on)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("last loss"), std::string::npos) << r.out;
  Result lower = run("train --config " + cfg + " --resume --set train.max_steps=1");
  EXPECT_NE(lower.out.find("nothing to do: the checkpoint is at step 2 and train.max_steps is 1"),
            std::string::npos)
      << lower.out;
  Result more = run("train --config " + cfg + " --resume --set train.max_steps=3");
  EXPECT_EQ(more.code, 0) << more.out;
  EXPECT_NE(more.out.find("done: 3 steps, last loss "), std::string::npos) << more.out;
  EXPECT_EQ(more.out.find("last loss 0.0000"), std::string::npos) << more.out;
}

// A config built on bases (base_config): the run's config.yaml names the chain, holds every key
// and no base_config; a run from that record resumes its first checkpoint to the same last loss
// (the same config hash: no "config differs" note), and the chain's own file resumes too. A cycle
// is one message and exit 2.
TEST_F(Cli, BaseConfigChainIsRecordedAndResumes) {
  fs::create_directories(dir_ / "configs");
  fs::rename(config("  save_every: 1\n  keep_last: 0\n"), dir_ / "configs" / "base.yaml");
  std::ofstream(dir_ / "configs" / "mid.yaml")
      << "base_config: base.yaml\nmodel:\n  num_hidden_layers: 2\n";
  const std::string exp = (dir_ / "exp.yaml").string();
  std::ofstream(exp) << "base_config: configs/mid.yaml\ntrain:\n  seed: 7\n";
  Result t = run("train --config " + exp);
  ASSERT_EQ(t.code, 0) << t.out;
  const size_t at = t.out.find("done: 2 steps, last loss ");
  ASSERT_NE(at, std::string::npos) << t.out;
  const std::string done = t.out.substr(at, t.out.find('\n', at) - at);

  std::ifstream f(dir_ / "out" / "config.yaml");
  const std::string record((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string mid = (dir_ / "configs/mid.yaml").string();
  const std::string base = (dir_ / "configs/base.yaml").string();
  EXPECT_NE(record.find("# config: " + exp + "\n"), std::string::npos) << record;
  EXPECT_NE(record.find("#   " + exp + " -> " + mid + " -> " + base + "\n#   " + exp + " -> " +
                        mid + "\n"),
            std::string::npos)
      << record;
  EXPECT_NE(record.find("num_hidden_layers: 2\n"), std::string::npos) << record;
  EXPECT_NE(record.find("seed: 7\n"), std::string::npos) << record;
  EXPECT_EQ(record.find("base_config:"), std::string::npos) << record;
  std::ifstream cf(dir_ / "out" / "checkpoints" / "step_0000002" / "config.yaml");
  const std::string saved((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(saved, record);

  Result again =
      run("train --config " + (dir_ / "out" / "config.yaml").string() + " --resume step_0000001");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out.find("the config differs"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find(done), std::string::npos) << done << "\n" << again.out;
  Result more = run("train --config " + exp + " --resume --set train.max_steps=3");
  EXPECT_EQ(more.code, 0) << more.out;
  EXPECT_NE(more.out.find("done: 3 steps"), std::string::npos) << more.out;

  std::ofstream(dir_ / "configs" / "cycle.yaml") << "base_config: mid.yaml\n";
  std::ofstream(dir_ / "configs" / "mid.yaml") << "base_config: cycle.yaml\n";
  Result cycle = run("train --config " + mid);
  EXPECT_EQ(cycle.code, 2) << cycle.out;
  EXPECT_NE(cycle.out.find(mid + " -> " + (dir_ / "configs/cycle.yaml").string() + " -> " + mid +
                           ": base_config cycle"),
            std::string::npos)
      << cycle.out;
}

// LoRA from the command line: a bad lora section is one message (exit 2); a LoRA run's checkpoint
// exports as a PEFT adapter directory and merged; logits take the checkpoint, or the base plus
// --adapter, with the same result, and generate takes the checkpoint.
TEST_F(Cli, LoraTrainExportAndUse) {
  const std::string cfg = config("  save_every: 0\n");
  Result bad =
      run("train --config " + cfg + " --set lora.rank=4 --set lora.target_modules=[qproj]");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("lora.target_modules: 'qproj' is not a projection of a llama model"),
            std::string::npos)
      << bad.out;
  Result neg = run("train --config " + cfg + " --set lora.rank=-1");
  EXPECT_EQ(neg.code, 2) << neg.out;
  EXPECT_NE(neg.out.find("lora.rank must be >= 0 (0 = full training) (got -1)"), std::string::npos)
      << neg.out;
  Result drop = run("train --config " + cfg + " --set lora.rank=2 --set lora.dropout=1");
  EXPECT_EQ(drop.code, 2) << drop.out;
  EXPECT_NE(drop.out.find("lora.dropout must be in [0, 1) (got 1)"), std::string::npos) << drop.out;
  Result bf16 = run("train --config " + cfg + " --set lora.base_dtype=bf16");
  EXPECT_EQ(bf16.code, 2) << bf16.out;
  EXPECT_NE(bf16.out.find("lora.base_dtype: bf16 keeps a frozen base; it needs lora.rank > 0"),
            std::string::npos)
      << bf16.out;

  const std::string base = (dir_ / "base").string();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  ASSERT_EQ(
      run("export --checkpoint " + (dir_ / "out").string() + " --out " + base + " --dtype f32")
          .code,
      0);
  const std::string lora_run = (dir_ / "lora").string();
  Result t = run("train --config " + cfg + " --set train.init_from=" + base +
                 " --set train.out_dir=" + lora_run + " --set lora.rank=2 --set train.lr=0.05");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("LoRA: rank 2, alpha 16, 7 adapters"), std::string::npos) << t.out;
  // The same run with the base held in bf16 trains too, and says so.
  Result half = run("train --config " + cfg + " --set train.init_from=" + base +
                    " --set train.out_dir=" + (dir_ / "lora_bf16").string() +
                    " --set lora.rank=2 --set train.lr=0.05 --set lora.base_dtype=bf16");
  ASSERT_EQ(half.code, 0) << half.out;
  EXPECT_NE(half.out.find("the base is frozen and held in bf16"), std::string::npos) << half.out;
  const std::string ids = (dir_ / "ids.json").string();
  std::ofstream(ids) << "[104, 101, 108, 108, 111, 32, 119]";
  auto loss_of = [&](const std::string& args) {
    Result r = run("logits " + args + " --ids-file " + ids + " --out " +
                   (dir_ / "l.safetensors").string());
    EXPECT_EQ(r.code, 0) << r.out;
    return r.out;
  };
  const std::string from_checkpoint = loss_of("--model " + lora_run + "/checkpoints/step_0000002");
  const std::string adapter = (dir_ / "adapter").string();
  // A PEFT adapter exports in f32, the dtype its adapters train in (as PEFT saves one), unless
  // --dtype says otherwise: the same losses as the checkpoint's.
  Result e = run("export --checkpoint " + lora_run + " --out " + adapter);
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("as a PEFT adapter directory (14 tensors, f32;"), std::string::npos)
      << e.out;
  Result e16 = run("export --checkpoint " + lora_run + " --out " + (dir_ / "adapter16").string() +
                   " --dtype bf16");
  ASSERT_EQ(e16.code, 0) << e16.out;
  EXPECT_NE(e16.out.find("(14 tensors, bf16;"), std::string::npos) << e16.out;
  EXPECT_TRUE(fs::exists(fs::path(adapter) / "adapter_config.json"));
  EXPECT_EQ(loss_of("--model " + base + " --adapter " + adapter), from_checkpoint);
  EXPECT_NE(loss_of("--model " + base), from_checkpoint);  // the adapters changed something
  Result m = run("export --checkpoint " + lora_run + " --out " + (dir_ / "merged").string() +
                 " --dtype f32 --merge");
  ASSERT_EQ(m.code, 0) << m.out;
  const std::string g = "generate --temperature 0 --max-new-tokens 5 --prompt-ids '[104, 101]' ";
  Result g1 = run(g + "--checkpoint " + lora_run);  // its tokenizer: bytes, from state.json
  EXPECT_EQ(g1.code, 0) << g1.out;
  // info counts a training step of the adapters: gradients and moments of theirs alone.
  Result info = run("info --model " + base + " --adapter " + adapter + " --seq-len 8 --json");
  ASSERT_EQ(info.code, 0) << info.out;
  const auto ij = nlohmann::json::parse(info.out);
  EXPECT_EQ(ij["lora"]["rank"], 2);
  EXPECT_EQ(ij["lora"]["tensors"], 14);
  EXPECT_LT(ij["training_step"]["gradients"].get<int64_t>(),
            ij["training_step"]["weights"].get<int64_t>() / 4);
  // The adapters' scratch ([2 N r], plus [N, widest input] with dropout) is a line of its own,
  // in the total.
  const auto& ts = ij["training_step"];
  EXPECT_GE(ts["lora_scratch"].get<int64_t>(), 2 * 8 * 2 * 4);
  int64_t sum = 0;
  for (const char* k :
       {"weights", "gradients", "adamw_m", "adamw_v", "activations", "lora_scratch"})
    sum += ts[k].get<int64_t>();
  EXPECT_EQ(ts["total"].get<int64_t>(), sum);
  Result ci = run("info --model " + lora_run + " --seq-len 8 --json");
  ASSERT_EQ(ci.code, 0) << ci.out;
  EXPECT_EQ(nlohmann::json::parse(ci.out)["lora"]["parameters"], ij["lora"]["parameters"]);
  // lora.init_from continues from a PEFT adapter: its settings, or keys that agree with them.
  const std::string cont = " --set train.init_from=" + base + " --set lora.init_from=" + adapter;
  Result c =
      run("train --config " + cfg + cont + " --set train.out_dir=" + (dir_ / "cont").string());
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("init: LoRA adapters of '" + adapter + "'"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("LoRA: rank 2, alpha 16, 7 adapters"), std::string::npos) << c.out;
  Result clash = run("train --config " + cfg + cont + " --set lora.rank=4");
  EXPECT_EQ(clash.code, 2) << clash.out;
  EXPECT_NE(clash.out.find("lora.rank is 4 here but 2 in lora.init_from '" + adapter + "'"),
            std::string::npos)
      << clash.out;
  Result targets = run("train --config " + cfg + cont + " --set lora.rank=2" +
                       " --set lora.target_modules=[q_proj]");
  EXPECT_EQ(targets.code, 2) << targets.out;
  EXPECT_NE(targets.out.find("lora.target_modules is [q_proj] here but [self_attn.q_proj, "
                             "self_attn.k_proj"),
            std::string::npos)
      << targets.out;
  Result only = run("export --checkpoint " + base + " --out " + (dir_ / "x").string() +
                    " --adapter " + adapter);
  EXPECT_EQ(only.code, 2) << only.out;
  EXPECT_NE(only.out.find("--adapter: give --merge too"), std::string::npos) << only.out;
  Result wrong = run("logits --model " + base + " --adapter " + base + " --ids-file " + ids +
                     " --out " + (dir_ / "l.safetensors").string());
  EXPECT_EQ(wrong.code, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("adapter_config.json' not found (not a PEFT adapter directory)"),
            std::string::npos)
      << wrong.out;
}

TEST_F(Cli, BenchPrintsOneJsonObject) {
  Result g = run("bench --config " + config() + " --steps 1 --set train.threads=1");
  ASSERT_EQ(g.code, 0) << g.out;
  for (const char* key :
       {"\"tokens_per_s\"", "\"step_ms\"", "\"mfu\"", "\"peak_rss_bytes\"", "\"backend\"",
        "\"shape\"", "\"gemm_share\"", "\"kernels\"", "\"host_ms\":\"n/a\""})
    EXPECT_NE(g.out.find(key), std::string::npos) << key << g.out;
}

// The kernels bench reports: OpenBLAS's core, and OPENBLAS_CORETYPE named where it chose them.
TEST_F(Cli, BenchReportsTheBlasKernels) {
  const std::string bench = "bench --config " + config() + " --steps 1 --set train.threads=1";
  auto json = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.find('{'), out.rfind('}') - out.find('{') + 1));
  };
  Result own = capture("env -u OPENBLAS_CORETYPE " + std::string(LMT_BINARY) + " " + bench);
  ASSERT_EQ(own.code, 0) << own.out;
  const nlohmann::json a = json(own.out);
  const std::string k = a.at("kernels").get<std::string>();
  EXPECT_EQ(k.rfind("OpenBLAS ", 0), 0u) << k;
  EXPECT_NE(k.find("; core "), std::string::npos) << k;
  EXPECT_NE(k.find("OPENBLAS_CORETYPE unset"), std::string::npos) << k;
  Result held =
      capture("env OPENBLAS_CORETYPE=Sandybridge " + std::string(LMT_BINARY) + " " + bench);
  ASSERT_EQ(held.code, 0) << held.out;
  const nlohmann::json b = json(held.out);
  EXPECT_NE(b.at("kernels").get<std::string>().find(
                "core Sandybridge (set by OPENBLAS_CORETYPE=Sandybridge)"),
            std::string::npos)
      << b.at("kernels");
  // Both precisions' GEMM peaks: f32's (MFU's here) and bf16's, or why bf16 cannot run.
  const nlohmann::json& peaks = a.at("gemm_peaks");
  EXPECT_EQ(peaks.at("f32").at("flops"), a.at("peak_flops")) << peaks;
  EXPECT_GT(peaks.at("f32").at("fraction").get<double>(), 0) << peaks;
  const nlohmann::json& bf16 = peaks.at("bf16");
  if (bf16.contains("unsupported"))
    EXPECT_NE(bf16.at("unsupported").get<std::string>().find("AVX512-BF16"), std::string::npos);
  else
    EXPECT_GT(bf16.at("flops").get<double>(), 0) << peaks;
}

// train.precision: bf16 on the CPU backend needs bf16 matrix instructions: with oneDNN capped
// below them (ONEDNN_MAX_CPU_ISA, as on a CPU without them) training refuses in one message
// naming the key, the missing instructions and the cap, before it loads anything; emulated, a
// bf16 step runs and bench names the products.
TEST_F(Cli, Bf16OnTheCpuBackendNeedsBf16MatrixInstructions) {
  const std::string sets = " --set train.precision=bf16 --set train.threads=1";
  Result refused = capture("env -u LMTRAIN_CPU_BF16 ONEDNN_MAX_CPU_ISA=AVX2 " +
                           std::string(LMT_BINARY) + " train --config " + config() + sets);
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.out.find("train.precision: bf16 on the CPU backend needs bf16 matrix "
                             "instructions (AVX512-BF16 or AMX)"),
            std::string::npos)
      << refused.out;
  EXPECT_NE(refused.out.find("ONEDNN_MAX_CPU_ISA=AVX2"), std::string::npos) << refused.out;
  Result emulated = capture("env LMTRAIN_CPU_BF16=emulate " + std::string(LMT_BINARY) +
                            " bench --config " + config() + " --steps 1" + sets);
  ASSERT_EQ(emulated.code, 0) << emulated.out;
  const std::string& out = emulated.out;
  const nlohmann::json j =
      nlohmann::json::parse(out.substr(out.find('{'), out.rfind('}') - out.find('{') + 1));
  EXPECT_EQ(j.at("precision"), "bf16");
  EXPECT_NE(j.at("kernels").get<std::string>().find("bf16 emulated"), std::string::npos)
      << j.at("kernels");
  const nlohmann::json& peaks = j.at("gemm_peaks");
  EXPECT_EQ(peaks.at("bf16").at("flops"), j.at("peak_flops")) << peaks;  // MFU's, in bf16
  EXPECT_NE(peaks.at("bf16").at("source").get<std::string>().find("bf16 GEMM"), std::string::npos);
  EXPECT_GT(peaks.at("f32").at("flops").get<double>(), 0) << peaks;
  EXPECT_GT(peaks.at("f32").at("fraction").get<double>(), 0) << peaks;
}

}  // namespace

namespace {

TEST(CliDocs, ConfigPageMatchesHelpConfig) {
  Result r = run("train --help-config");
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(std::string(LMT_SOURCE_DIR) + "/docs/config.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string page = ss.str();
  const size_t begin = page.find("```\n"), end = page.rfind("```");
  ASSERT_NE(begin, std::string::npos);
  EXPECT_EQ(page.substr(begin + 4, end - begin - 4), r.out)
      << "docs/config.md is stale: regenerate it from `lmtrain train --help-config`";
}

}  // namespace

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `lmtrain tokenize` gives the reference libraries' ids for every fixture tokenizer and text.
TEST(CliTokenize, FileModeMatchesReferenceIds) {
  const std::string dir = std::string(LMT_TEST_DATA) + "/tokenizers";
  auto ref = nlohmann::json::parse(slurp(dir + "/ref_ids.json"));
  const fs::path tmp = fs::temp_directory_path() / ("lmt_tok_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream in(tmp / "in.jsonl");
    for (const auto& t : ref["texts"]) in << nlohmann::json{{"text", t}}.dump() << '\n';
  }
  const std::pair<const char*, const char*> cases[] = {
      {"bytelevel_bpe", "bytelevel_bpe.json"},
      {"llama3_style_bpe", "llama3_style_bpe.json"},
      {"sp_bpe", "sp_bpe.model"},
      {"sp_unigram", "sp_unigram.model"}};
  for (auto [name, file] : cases) {
    Result r = run("tokenize --tokenizer " + dir + "/" + file + " --input " +
                   (tmp / "in.jsonl").string() + " --output " + (tmp / "out.jsonl").string());
    ASSERT_EQ(r.code, 0) << name << r.out;
    std::ifstream out(tmp / "out.jsonl");
    std::string line;
    size_t i = 0;
    for (; std::getline(out, line); ++i) {
      ASSERT_LT(i, ref[name].size()) << name;
      EXPECT_EQ(nlohmann::json::parse(line)["ids"], ref[name][i]) << name << " text " << i;
    }
    EXPECT_EQ(i, ref[name].size()) << name;
  }
  std::ofstream(tmp / "bad.jsonl") << "{\"text\": \"ok\"}\n{\"body\": 1}\n";
  Result bad = run("tokenize --tokenizer bytes --input " + (tmp / "bad.jsonl").string() +
                   " --output " + (tmp / "o.jsonl").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("bad.jsonl:2: no string field 'text'"), std::string::npos) << bad.out;
  fs::remove_all(tmp);
}

TEST(CliTokenize, TextModeAndErrors) {
  const std::string dir = std::string(LMT_TEST_DATA) + "/tokenizers";
  Result r =
      run("tokenize --tokenizer " + dir + "/sp_bpe.model --text 'Hello world!' --add-special");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out),
            nlohmann::json::parse("[1,477,553,478,486,385,301,277,486,487,554]"));
  Result b = run("tokenize --tokenizer bytes --text Hi --add-special");
  EXPECT_EQ(nlohmann::json::parse(b.out), nlohmann::json::parse("[72,105,256]"));
  Result missing = run("tokenize --tokenizer /nonexistent/tok.json --text x");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("/nonexistent/tok.json"), std::string::npos) << missing.out;
  Result neither = run("tokenize --tokenizer " + dir + "/train.txt --text x");
  EXPECT_EQ(neither.code, 2);
  EXPECT_NE(neither.out.find("train.txt"), std::string::npos) << neither.out;
}

}  // namespace
